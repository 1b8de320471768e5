"""Document classes in the influence run, as the privacy proxy serves them: a document of class
``public`` (``classes``, the file ``ctxleak serve --classes`` takes) is no secret of anyone's,
so no setting bounds it and no mechanism protects it.

An example's public documents are put first among its passages (:func:`with_classes`), and
stay in every prompt at full strength: Context Influence Decoding's prompt "without the
documents" ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
Def. 3.4) holds them (:func:`public_prompt`, the prompt parts' ``empty_ids``), so CID mixes the
prompt with every document and the prompt with the public ones only, and bounded CID bounds
what the private documents add; the other mechanisms answer over the private documents only,
each of their prompts holding the public texts first (:func:`~ctxleak.run.classes.with_public`,
the proxy's own rule), and retrieve from the datastore's private documents only. The influence
the run reports for the whole context is then the private documents' over the public ones
(its "without" side holds the public ones); each passage's leave-one-out, public ones
included, is measured as before. A question whose documents are all public is decoded as
plain decoding decodes it under every setting of CID (both of its prompts are the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.influence.data import InfluenceExample, template_for
from ctxleak.methods.rag.app_prompt import app_messages
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.prompts import (
    LIST_SEPARATOR,
    PromptOf,
    app_chat_prompt,
    list_pieces,
    template_prompt,
)
from ctxleak.run.classes import PUBLIC


def with_classes(example: InfluenceExample, classes: Mapping[str, str] | None
                 ) -> InfluenceExample:
    """``example`` with its documents of class public first (in retrieval order, then the
    others in theirs), its passages and context rebuilt in that order, and their texts as
    ``public``; the example itself where it has no public document."""
    docs = example.documents or ()
    if not classes or not docs or not example.passages or len(example.passages) != len(docs):
        return example
    texts = [p[len(LIST_SEPARATOR):] if j and p.startswith(LIST_SEPARATOR) else p
             for j, p in enumerate(example.passages)]
    public = [j for j, d in enumerate(docs) if d.id is not None
              and classes.get(str(d.id)) == PUBLIC]
    if not public:
        return example
    order = public + [j for j in range(len(docs)) if j not in public]
    passages = tuple(list_pieces([texts[j] for j in order]))
    return replace(example, documents=tuple(docs[j] for j in order), passages=passages,
                   context="".join(passages), public=tuple(texts[j] for j in public))


def prompt_holding(lm: LanguageModel, example: InfluenceExample, template: str | None,
                   context_tokens: int | None, reserve: int) -> PromptOf:
    """The token ids of ``example``'s prompt holding the given document texts (in order; none:
    the prompt without retrieval): under the app's messages where the example is scored under
    them, else the run's template cut to the model's window."""
    messages = app_messages(lm, example)
    if messages is not None:
        return app_chat_prompt(lm, messages, example.query)
    return template_prompt(lm, example.query, template_for(example, template), context_tokens,
                           reserve)


def public_prompt(lm: LanguageModel, example: InfluenceExample, template: str | None,
                  context_tokens: int | None, reserve: int) -> tuple[int, ...] | None:
    """The prompt holding ``example``'s public documents only (CID's side without the
    documents), None where it has none."""
    if not example.public:
        return None
    return tuple(prompt_holding(lm, example, template, context_tokens,
                                reserve)(list(example.public)))


def private_datastore(store: Datastore | None, classes: Mapping[str, str] | None
                      ) -> Datastore | None:
    """``store`` without its documents of class public (None: none left), as the proxy's
    mechanisms retrieve from the private documents only."""
    if store is None or not classes:
        return store
    rest = [(i, t) for i, t in store.documents if classes.get(i) != PUBLIC]
    return Datastore.of(rest) if rest else None


__all__ = ["prompt_holding", "private_datastore", "public_prompt", "with_classes"]
