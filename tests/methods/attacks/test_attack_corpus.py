"""The bundled corpora an attack can name: ``demo-rag`` (15 documents, too few for any attack to
show ε > 0) and ``demo-datastore`` (288, enough for a membership audit that holds half out)."""

from __future__ import annotations

import pytest

from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.attack_method import attack_documents
from ctxleak.methods.attacks.lower_bound import eps_lower_bound


def test_the_bundled_datastore_is_large_enough_for_a_perfect_attack_to_show_two_nats():
    docs = attack_documents("demo-datastore")
    assert len(docs) == 288 and len({d.id for d in docs}) == 288
    half = len(docs) // 2
    # a perfect attack on a seeded half held out, its threshold fixed before looking
    assert eps_lower_bound(half, half, 0, half)["eps_lower"] > 2.0
    # and on half of those (a split-half threshold spends the other half choosing it)
    assert eps_lower_bound(half // 2, half // 2, 0, half // 2)["eps_lower"] > 2.0
    small = attack_documents("demo-rag")
    assert len(small) == 15
    assert eps_lower_bound(4, 4, 0, 3)["eps_lower"] == 0.0  # 15 documents show nothing
    with pytest.raises(ConfigError, match="demo-datastore"):
        attack_documents(42)
