"""Prompt templates and task instructions for the training-free embedders.

- PromptEOL (Jiang et al. 2023b, as described in “A Text is Worth Several Tokens” §2.2): ``This sentence: "[text]" means in
  one word: "`` read out at the last token.
- Echo embeddings (Springer et al. 2024, “A Text is Worth Several Tokens” §2.2): ``Rewrite the sentence: [text], rewritten
  sentence: [text]``, mean-pooled over the *second* occurrence of the text only.
- Per-task query instructions, “A Text is Worth Several Tokens” App. C.2 / Table 7 (following LLM2Vec: queries only).
- I_next / I_self of AutoRegEmbed (AutoRegEmbed App. D, Table 5).

A template is a string with ``{text}`` placeholders. :meth:`Template.render` returns the prompt
and the character span of the occurrence of the text that mean-type pooling reads.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

from dataclasses import dataclass

__all__ = [
    "Template",
    "TEMPLATES",
    "INSTRUCTIONS",
    "I_NEXT",
    "I_SELF",
    "get_template",
    "resolve_instruction",
    "INSTRUCTION_SEPARATOR",
]

PLACEHOLDER = "{text}"

#: how an instruction is joined in front of the rendered prompt
INSTRUCTION_SEPARATOR = "\n"


@dataclass(frozen=True)
class Template:
    """A prompt pattern with one or more ``{text}`` placeholders."""

    name: str
    pattern: str

    def __post_init__(self) -> None:
        if PLACEHOLDER not in self.pattern:
            raise InvalidInputError(f"template {self.name!r} has no {PLACEHOLDER} placeholder: {self.pattern!r}")

    @property
    def n_slots(self) -> int:
        return self.pattern.count(PLACEHOLDER)

    def prefix(self, instruction: str | None = None) -> str:
        """The rendered prompt before the first text slot: the same for every text (its KV
        cache can be computed once, encoders.prefix_cache)."""
        head = self.pattern.split(PLACEHOLDER)[0]
        return (instruction + INSTRUCTION_SEPARATOR if instruction else "") + head

    def render(self, text: str, instruction: str | None = None) -> tuple[str, tuple[int, int]]:
        """Fill every slot with ``text``; prefix ``instruction`` + separator when given.

        Returns (prompt, (start, end)): the character span of the *last* occurrence of the text,
        which is the span pooled by mean-type pooling (the second one for echo).
        """
        parts = self.pattern.split(PLACEHOLDER)
        out = instruction + INSTRUCTION_SEPARATOR if instruction else ""
        span = (0, 0)
        for i, part in enumerate(parts):
            out += part
            if i < len(parts) - 1:
                span = (len(out), len(out) + len(text))
                out += text
        return out, span


TEMPLATES: dict[str, Template] = {
    "none": Template("none", "{text}"),
    "prompteol": Template("prompteol", 'This sentence: "{text}" means in one word: "'),
    "echo": Template("echo", "Rewrite the sentence: {text}, rewritten sentence: {text}"),
}


def get_template(template: str | Template) -> Template:
    """A registered template name, a Template, or a literal pattern containing ``{text}``."""
    if isinstance(template, Template):
        return template
    if not isinstance(template, str):
        raise InvalidInputError(f"template must be a name or a pattern string, got {type(template).__name__}")
    if template in TEMPLATES:
        return TEMPLATES[template]
    if PLACEHOLDER in template:
        return Template("custom", template)
    raise InvalidInputError(
        f"unknown template {template!r}: use one of {sorted(TEMPLATES)} or a pattern containing {PLACEHOLDER}"
    )


#: “A Text is Worth Several Tokens” Table 7 (verbatim), plus alignir's own wording for the classic collections here
#: (marked: not from the paper).
INSTRUCTIONS: dict[str, str] = {
    # “A Text is Worth Several Tokens”, App. C.2, Table 7
    "fiqa": "Given a financial question, retrieve user replies that best answer the question",
    "nfcorpus": "Given a question, retrieve relevant documents that best answer the question",
    "scifact": "Given a scientific claim, retrieve documents that support or refute the claim",
    "arguana": "Given a claim, find documents that refute the claim",
    # alignir additions (not in the paper), same style
    "cran": "Given a question about aerodynamics, retrieve abstracts that answer the question",
    "cisi": "Given a question about information science, retrieve abstracts that answer the question",
    "med": "Given a medical question, retrieve abstracts that answer the question",
    "adi": "Given a question about documentation, retrieve abstracts that answer the question",
}

#: AutoRegEmbed App. D, Table 5 (retrieval task), keys by role
I_NEXT = {
    "retrieval": "Use one word to represent the query in a retrieval task. The word is: \u201c",
    "sts": "This sentence means in one word: \u201c",
}
I_SELF = {
    "retrieval": "Use one word to represent the passage in a retrieval task. The word is: \u201c",
    "sts": "This sentence means in one word: \u201c",
}


def resolve_instruction(instruction: str | None) -> str | None:
    """None/"" -> no instruction; a task name in INSTRUCTIONS -> its text; else the literal string."""
    if instruction is None:
        return None
    if not isinstance(instruction, str):
        raise InvalidInputError(f"instruction must be a string or None, got {type(instruction).__name__}")
    s = instruction.strip()
    if not s:
        return None
    return INSTRUCTIONS.get(s.lower(), s)
