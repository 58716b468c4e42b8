"""Records -> token ids through the tokenizer's chat template, with an assistant-only loss mask.

A conversation (SFT) supervises every assistant turn (but those marked ``trained=False``); a reply row (DPO's
chosen and rejected, GRPO's reference) supervises only its final reply. Supervised means the rendered content
and the end-of-turn token, nothing else (not the role header, not the newline a template adds after the
end-of-turn token). The text is cut at the template's own boundaries and each piece tokenized alone, so the
supervised spans decode to exactly the assistant contents (checked for every conversation) and a prompt is
tokenized exactly as it is at generation time.

Content is text, never template structure: a control token's string inside a turn (``<|im_end|>``,
``<|image_pad|>``) is tokenized as ordinary text (``ContentText``), so no record opens or closes a turn.

Images (an image-text model's renderer): a rendered sample lists the images of the turns it keeps
(``Rendered.images``), in order. Truncation never cuts into an image: history turns that carry one are
never dropped, and a cut of tokens removes text tokens around an image's span instead; images (and the
system turn) that alone exceed the budget are an ImageBudgetError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rpbench.data.records import Turn, as_messages

IGNORE_INDEX = -100
REPLY_MARKER = "\u2063rpbench-reply\u2063"  # stands in for an assistant reply to locate where replies start
ESCAPE_OPEN, ESCAPE_CLOSE = "\U000f0000", "\U000f0001"  # private-use: no chat template writes them


class ContentText:
    """Keeps message contents out of the template's structure. ``escape`` replaces each control string in a
    content (a special token's text, the reply marker, the escape character itself) with an escape that
    no template or tokenizer reads as structure; ``encode`` tokenizes rendered text, each escape as its
    string's ordinary text tokens (``split_special_tokens``), the rest as it is."""

    def __init__(self, tokenizer):
        special = {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}
        self.tokenizer = tokenizer
        self.strings = sorted(special | {REPLY_MARKER, ESCAPE_OPEN}, key=len, reverse=True)
        self._index = {string: i for i, string in enumerate(self.strings)}
        self._control = re.compile("|".join(map(re.escape, self.strings)))
        self._escaped = re.compile(f"{ESCAPE_OPEN}([0-9]+){ESCAPE_CLOSE}")

    def escape(self, content: str) -> str:
        return self._control.sub(lambda m: f"{ESCAPE_OPEN}{self._index[m[0]]}{ESCAPE_CLOSE}", content)

    def escape_turns(self, turns: Sequence[Turn]) -> list[Turn]:
        return [replace(turn, content=self.escape(turn.content)) for turn in turns]

    def unescape(self, text: str) -> str:
        return self._escaped.sub(lambda m: self.strings[int(m[1])], text) if ESCAPE_OPEN in text else text

    def encode(self, text: str) -> list[int]:
        if ESCAPE_OPEN not in text:
            return self._plain(text)
        ids, cursor = [], 0
        for match in self._escaped.finditer(text):
            ids += self._plain(text[cursor : match.start()])
            ids += self._plain(self.strings[int(match[1])], split_special_tokens=True)
            cursor = match.end()
        return ids + self._plain(text[cursor:])

    def _plain(self, text: str, **options) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, **options)["input_ids"] if text else []


class TemplateError(ValueError):
    """The chat template cannot be cut into prompt and supervised pieces for this conversation."""


class ImageBudgetError(ValueError):
    """A conversation's images (with its system turn) take more tokens than the length budget."""


@dataclass(frozen=True)
class Rendered:
    input_ids: list[int]
    labels: list[int]
    dropped_turns: int = 0
    truncated: bool = False
    images: tuple[str, ...] = ()  # the images of the kept turns, in the order their tokens appear

    @property
    def n_supervised(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels)

    @property
    def n_supervised_turns(self) -> int:
        """The runs of supervised tokens: one per trained assistant turn kept (a header always parts two)."""
        supervised = [label != IGNORE_INDEX for label in self.labels]
        return sum(now and not before for before, now in zip([False, *supervised], supervised, strict=False))

    def as_sample(self) -> dict[str, list]:
        return {"input_ids": self.input_ids, "labels": self.labels, "images": list(self.images)}


@dataclass(frozen=True)
class FittedPrompt:
    """A prompt's token ids fitted to a budget: ``dropped_turns`` history turns left out, and ``cut`` how
    its tokens were cut when that was not enough ("" none, "after_system", "left"); ``images``: the
    images of the kept turns, in order."""

    input_ids: list[int]
    dropped_turns: int = 0
    cut: str = ""
    images: tuple[str, ...] = ()  # the images of the kept turns, in order


class ChatRenderer:
    """Renders conversations for one tokenizer; ``end_of_turn`` is the token closing an assistant turn;
    ``messages`` turns a conversation's Turns into chat-template messages (the model family's: text, or text
    with images, a system turn where its template takes one); ``chat_template``: a Jinja text rendering
    instead of the tokenizer's own;
    ``expand_images(text, image paths)`` repeats each image placeholder to the image's token count and
    ``image_spans(ids)`` finds each image's ``[start, end)`` token span (an image-text model's tokenizer:
    ``rpbench.models.vision.ImageTextTokenizer.expand_image_tokens`` / ``image_spans``)."""

    def __init__(
        self,
        tokenizer,
        end_of_turn: str | None,
        max_length: int,
        messages: Callable[[Sequence[Turn]], list[dict]] = as_messages,
        expand_images: Callable[[str, list[str]], str] | None = None,
        image_spans: Callable[[Sequence[int]], list[tuple[int, int]]] | None = None,
        chat_template: str | None = None,
    ):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.end_of_turn = end_of_turn or tokenizer.eos_token
        self.max_length = max_length
        self.messages = messages
        self.expand_images = expand_images
        self.image_spans = image_spans
        self.content = ContentText(tokenizer)
        # Renders whose tokens were cut to the budget (a conversation, a reply row, a prompt), reply pairs of
        # which one reply was cut and the other kept whole, and training renders that left their oldest
        # history turns out: counted for the run's report.
        self.cuts = {"truncated": 0, "cut_unevenly": 0, "history_dropped": 0}

    # -- text level -------------------------------------------------------------------------------
    def _template(self, turns: Sequence[Turn], generation_prompt: bool) -> str:
        """The chat-template text of ``turns``; with ``expand_images``, each image placeholder is repeated as
        many times as the image has tokens, so every length below is the model's real one."""
        text = self.tokenizer.apply_chat_template(
            self.messages(turns),
            tokenize=False,
            add_generation_prompt=generation_prompt,
            chat_template=self.chat_template,
        )
        if self.expand_images is None:
            return text
        return self.expand_images(text, [turn.image for turn in turns if turn.image is not None])

    def pieces(self, turns: Sequence[Turn]) -> list[tuple[str, bool]]:
        """The rendered conversation as (text, supervised) pieces in order.

        Where an assistant reply starts is found by rendering the conversation up to that turn with a
        marker as the reply: this works for any turn, the first one included. ``turns``: their contents
        escaped (``ContentText.escape_turns``), as every public method passes them.
        """
        full = self._template(turns, generation_prompt=False)
        pieces: list[tuple[str, bool]] = []
        cursor = 0
        for i, turn in enumerate(turns):
            if turn.role != "assistant":
                continue
            marked = self._template([*turns[:i], Turn("assistant", REPLY_MARKER)], generation_prompt=False)
            prefix = marked[: marked.find(REPLY_MARKER)]
            upto = self._template(turns[: i + 1], generation_prompt=False)
            if (
                REPLY_MARKER not in marked
                or not (upto.startswith(prefix) and full.startswith(upto))
                or len(prefix) < cursor
            ):
                raise TemplateError(
                    f"the chat template does not render turn {i} as a continuation of the turns before it; "
                    "rendering needs a prefix-stable template (set model.chat_template)"
                )
            reply = upto[len(prefix) :]
            end = reply.rfind(self.end_of_turn)
            if end < 0 or turn.content.strip() not in reply[:end]:
                raise TemplateError(
                    f"assistant turn {i} is not rendered as its content followed by {self.end_of_turn!r}"
                )
            end += len(self.end_of_turn)
            pieces.append((full[cursor : len(prefix)], False))
            pieces.append((reply[:end], turn.trained))
            cursor = len(prefix) + end
        pieces.append((full[cursor:], False))
        return [(text, sup) for text, sup in pieces if text]

    # -- token level ------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.content.encode(text)

    def _tokenize_pieces(self, pieces: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
        ids: list[int] = []
        labels: list[int] = []
        for text, supervised in pieces:
            piece_ids = self._encode_supervised(text) if supervised else self._encode(text)
            ids += piece_ids
            labels += piece_ids if supervised else [IGNORE_INDEX] * len(piece_ids)
        return ids, labels

    def render_conversation(self, turns: Sequence[Turn]) -> Rendered:
        """Every assistant turn supervised (but ``trained=False`` ones). Over-long: drop history turns from
        the left (the system turn and the final user/assistant exchange are kept, and so is every turn with
        an image), then cut the end around image spans. ``n_supervised`` may be 0: the caller reports such
        samples instead of training on them."""
        turns = self.content.escape_turns(turns)
        if not turns or turns[-1].role != "assistant":
            raise ValueError("a conversation to train on must end on an assistant turn")
        dropped = 0
        while True:
            ids, labels = self._tokenize_pieces(self.pieces(turns))
            images = _images(turns)
            if len(ids) <= self.max_length:
                self.cuts["history_dropped"] += dropped > 0
                return Rendered(ids, labels, dropped_turns=dropped, images=images)
            fewer = _drop_history(turns, final=2)
            if fewer is None:
                self.cuts["history_dropped"] += dropped > 0
                kept = self._keep(ids, self.max_length, keep_end=False)
                self.cuts["truncated"] += 1
                return Rendered([ids[i] for i in kept], [labels[i] for i in kept], dropped, True, images)
            dropped += len(turns) - len(fewer)
            turns = fewer

    def _keep(self, ids: list[int], limit: int, keep_end: bool, head: int = 0) -> list[int]:
        """Indices of the ``limit`` tokens of ``ids`` a cut keeps: the first ``head`` tokens and every image
        span, then the text tokens nearest the start (an end cut) or the end (``keep_end``, a left cut)."""
        protected = set(range(head))
        for start, end in self.image_spans(ids) if self.image_spans else []:
            protected.update(range(start, end))
        room = limit - len(protected)
        if room < 0:
            raise ImageBudgetError(
                f"its images{' and system turn' if head else ''} take {len(protected)} tokens, more than the "
                f"{limit} allowed (raise data.max_length / data.max_prompt_length or use smaller images)"
            )
        text = [i for i in range(len(ids)) if i not in protected]
        kept = text[len(text) - room :] if keep_end else text[:room]
        return sorted(protected.union(kept))

    def render_prompt(
        self, prompt: Sequence[Turn], max_length: int | None = None, generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of ``prompt`` followed by the assistant generation header (see ``fit_prompt``)."""
        return self.fit_prompt(prompt, max_length, generation_prompt).input_ids

    def fit_prompt(
        self, prompt: Sequence[Turn], max_length: int | None = None, generation_prompt: bool = True
    ) -> FittedPrompt:
        """``prompt`` with its generation header (``generation_prompt=False``: without it, the template
        ending on the last turn's end), fitted to ``max_length``: history turns are dropped from
        the left (the system turn and the final turn kept); if that is not enough, the tokens after the
        system turn are cut from their left (``cut="after_system"``), and only a system turn that alone
        fills the budget is itself cut from the left (``cut="left"``). Turns with an image are never
        dropped and cuts keep image spans whole (ImageBudgetError when images and system turn do not fit)."""
        limit = max_length or self.max_length
        turns, dropped = self.content.escape_turns(prompt), 0
        while True:
            ids = self._prompt_ids(turns, generation_prompt)
            fewer = _drop_history(turns, final=1) if len(ids) > limit else None
            if fewer is None:
                break
            dropped += len(turns) - len(fewer)
            turns = fewer
        images = _images(turns)
        if len(ids) <= limit:
            return FittedPrompt(ids, dropped, images=images)
        self.cuts["truncated"] += 1
        system = self._system_ids(turns, ids) if turns and turns[0].role == "system" else []
        if 0 < len(system) < limit or (system and images):
            kept = self._keep(ids, limit, keep_end=True, head=len(system))
            return FittedPrompt([ids[i] for i in kept], dropped, "after_system", images)
        return FittedPrompt([ids[i] for i in self._keep(ids, limit, keep_end=True)], dropped, "left", images)

    def _prompt_ids(self, turns: Sequence[Turn], generation_prompt: bool) -> list[int]:
        """Token ids of the rendered prompt, tokenized in the pieces training renders (each earlier reply
        apart), so a prompt's tokens are those of the same turns in a training sample even where a reply's
        first characters would merge with its header (a reply starting with a newline); then the generation
        header. A template that is not prefix-stable is tokenized whole."""
        with_header = self._template(turns, generation_prompt=generation_prompt)
        if not any(turn.role == "assistant" for turn in turns):
            return self._encode(with_header)
        base = self._template(turns, generation_prompt=False)
        try:
            pieces = self.pieces(turns)
        except TemplateError:
            return self._encode(with_header)
        if not with_header.startswith(base) or "".join(text for text, _ in pieces) != base:
            return self._encode(with_header)
        ids = [i for text, _ in pieces for i in self._encode(text)]
        return ids + (self._encode(with_header[len(base) :]) if len(with_header) > len(base) else [])

    def _system_ids(self, turns: Sequence[Turn], ids: list[int]) -> list[int]:
        """The leading tokens of ``ids`` that render the system turn alone ([] where the template does not
        render it as a prefix of the prompt)."""
        head = self._encode(self._template(turns[:1], generation_prompt=False))
        return head if ids[: len(head)] == head else []

    def render_completion(self, prompt: Sequence[Turn], completion: str) -> Rendered:
        """``prompt`` plus one assistant reply; only the reply is supervised (GRPO's references)."""
        return self.render_replies(prompt, [completion])[0]

    def render_replies(self, prompt: Sequence[Turn], replies: Sequence[str]) -> list[Rendered]:
        """One row per reply to the same ``prompt`` (DPO's chosen and rejected), only the reply supervised.

        The prompt is rendered and fitted once, so every row starts with the same prompt tokens (tokenized
        as at generation time): history turns are dropped from the left (system and final turn kept, and
        turns with an image) until the prompt and the longest reply fit ``max_length``; then the reply ends
        are cut. A prompt that alone fills the budget is cut at its end around image spans and leaves no
        reply token (``n_supervised == 0``: the caller reports it).
        """
        turns, dropped = self.content.escape_turns(prompt), 0
        replies = [self.content.escape(reply) for reply in replies]
        while True:
            split = [self._prompt_and_reply(turns, reply) for reply in replies]
            if any(text != split[0][0] for text, _ in split):
                raise TemplateError("the chat template renders the same prompt differently for different replies")
            prompt_ids = self._encode(split[0][0])
            reply_ids = [self._encode_supervised(reply) for _, reply in split]
            fits = len(prompt_ids) + max(map(len, reply_ids)) <= self.max_length
            fewer = None if fits else _drop_history(turns, final=1)
            if fewer is None:
                break
            dropped += len(turns) - len(fewer)
            turns = fewer
        if len(prompt_ids) > self.max_length:
            prompt_ids = [prompt_ids[i] for i in self._keep(prompt_ids, self.max_length, keep_end=False)]
        room = self.max_length - len(prompt_ids)
        rows = [
            Rendered(
                prompt_ids + ids[:room],
                [IGNORE_INDEX] * len(prompt_ids) + ids[:room],
                dropped_turns=dropped,
                truncated=len(ids) > room,
                images=_images(turns),
            )
            for ids in reply_ids
        ]
        cut = {row.truncated for row in rows}
        self.cuts["history_dropped"] += dropped > 0
        self.cuts["truncated"] += True in cut
        self.cuts["cut_unevenly"] += len(cut) > 1
        return rows

    def _prompt_and_reply(self, prompt: Sequence[Turn], reply: str) -> tuple[str, str]:
        """The text before the final reply (prompt and assistant header) and the reply's supervised text."""
        pieces = self.pieces([*prompt, Turn("assistant", reply)])
        last = max(i for i, (_, supervised) in enumerate(pieces) if supervised)
        return "".join(text for text, _ in pieces[:last]), pieces[last][0]

    def _encode_supervised(self, text: str) -> list[int]:
        ids = self._encode(text)
        if self.tokenizer.decode(ids) != self.content.unescape(text):
            raise TemplateError(f"supervised span does not round-trip through the tokenizer: {text[:60]!r}")
        return ids


def _images(turns: Sequence[Turn]) -> tuple[str, ...]:
    return tuple(turn.image for turn in turns if turn.image is not None)


def _drop_history(turns: list[Turn], final: int) -> list[Turn] | None:
    """``turns`` without their oldest history turns (two, or the one left), or None when none can go.

    History is what lies between the system turn and the last ``final`` turns; a turn with an image is
    never dropped (MMRole's image is on the first user turn: its reply and the next question go first).
    """
    first = 1 if turns and turns[0].role == "system" else 0
    droppable = [i for i in range(first, len(turns) - final) if turns[i].image is None]
    if not droppable:
        return None
    gone = set(droppable[:2])
    return [turn for i, turn in enumerate(turns) if i not in gone]
