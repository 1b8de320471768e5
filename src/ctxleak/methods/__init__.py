"""The methods: thin layers of maths on the engine (influence, icl, accounting and audit,
susceptibility, pii)."""
