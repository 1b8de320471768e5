"""Run directories, provenance and data loading shared by every command."""
