"""A tokenizer that also turns images into a vision-language model's inputs (the text and image halves
of a Hugging Face processor).

Everything that takes a tokenizer takes this one: attribute access, calls and ``len`` go to the text
tokenizer. What it adds: how many image tokens an image becomes (``image_token_count``), the expansion
of each image placeholder of a rendered text into that many tokens (``expand_image_tokens``, so token
counts, truncation and label masks see the real length), the pixel inputs of a list of images
(``pixel_inputs``) and saving the whole processor (``save_pretrained``), so an exported model loads with
``AutoProcessor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

_OWN = ("processor", "tokenizer", "image_token", "span_tokens", "_count")


class ImageError(ValueError):
    """An image that cannot be used: missing, unreadable, not an image."""


def load_image(path: str | Path):
    """The image at ``path`` as RGB (PIL), or an ImageError naming the path and the reason."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError as error:
        raise ImageError(f"image {str(path)!r} does not exist") from error
    except (UnidentifiedImageError, OSError) as error:
        raise ImageError(f"image {str(path)!r} cannot be read ({type(error).__name__}: {error})") from error


class ImageTextTokenizer:
    """``processor``: a Hugging Face processor with ``tokenizer``, ``image_processor`` and ``image_token``
    (one placeholder token per image in rendered text, expanded to the image's token count);
    ``span_tokens``: the tokens that open and close an image's tokens in rendered text (e.g.
    ``<|vision_start|>``, ``<|vision_end|>``), which belong to the image's span (``image_spans``)."""

    def __init__(self, processor, span_tokens: tuple[str, str] | None = None):
        object.__setattr__(self, "processor", processor)
        object.__setattr__(self, "tokenizer", processor.tokenizer)
        object.__setattr__(self, "image_token", processor.image_token)
        object.__setattr__(self, "span_tokens", span_tokens)
        object.__setattr__(self, "_count", lru_cache(maxsize=65536)(self._image_token_count))

    # -- the text tokenizer ------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.tokenizer, name, value)

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.tokenizer)

    # -- images ------------------------------------------------------------------------------------
    @property
    def image_token_id(self) -> int:
        return self.tokenizer.convert_tokens_to_ids(self.image_token)

    def _image_token_count(self, path: str) -> int:
        grid = self.pixel_inputs([path])["image_grid_thw"][0]
        return int(grid.prod()) // int(self.processor.image_processor.merge_size) ** 2

    def image_token_count(self, path: str) -> int:
        """How many image tokens the image at ``path`` becomes (cached per path)."""
        return self._count(str(path))

    def expand_image_tokens(self, text: str, images: Sequence[str]) -> str:
        """``text`` with its i-th image placeholder repeated ``image_token_count(images[i])`` times."""
        parts = text.split(self.image_token)
        if len(parts) - 1 != len(images):
            raise ValueError(f"the rendered text holds {len(parts) - 1} image placeholders for {len(images)} images")
        out = [parts[0]]
        for image, part in zip(images, parts[1:], strict=True):
            out += [self.image_token * self.image_token_count(image), part]
        return "".join(out)

    def image_spans(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """``[start, end)`` of each image's tokens in ``ids``: a run of image tokens, with the span tokens
        right before and after it. Truncation keeps or drops a span whole."""
        image = self.image_token_id
        opening, closing = (self.tokenizer.convert_tokens_to_ids(t) for t in self.span_tokens or (None, None))
        spans, i = [], 0
        while i < len(ids):
            if ids[i] != image:
                i += 1
                continue
            end = i
            while end < len(ids) and ids[end] == image:
                end += 1
            start = i - 1 if i > 0 and opening is not None and ids[i - 1] == opening else i
            stop = end + 1 if end < len(ids) and closing is not None and ids[end] == closing else end
            spans.append((start, stop))
            i = end
        return spans

    def pixel_inputs(self, paths: Sequence[str]) -> dict[str, torch.Tensor]:
        """``pixel_values`` and ``image_grid_thw`` of the images at ``paths``, in order."""
        out = self.processor.image_processor(images=[load_image(p) for p in paths], return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def model_image_inputs(self, input_ids: torch.Tensor, paths: Sequence[str]) -> dict[str, torch.Tensor]:
        """The model's image inputs for a batch of token ids whose image tokens belong, in row-major order,
        to the images at ``paths``: pixel values, grids and the per-token modality (1: image token); none
        for a batch without images."""
        if not paths:
            return {}
        return {**self.pixel_inputs(paths), "mm_token_type_ids": (input_ids == self.image_token_id).long()}

    def save_pretrained(self, out_dir: str | Path, **kwargs):
        return self.processor.save_pretrained(out_dir, **kwargs)


def is_image_text(tokenizer) -> bool:
    return isinstance(tokenizer, ImageTextTokenizer)
