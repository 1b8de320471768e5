"""The privacy proxy's tests (a package, so that its conftest is ``proxy.conftest`` beside the
root ``conftest`` that other tests import)."""
