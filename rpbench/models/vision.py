"""A tokenizer that also turns images into a vision-language model's inputs (the text and image halves
of a Hugging Face processor).

Everything that takes a tokenizer takes this one: attribute access, calls and ``len`` go to the text
tokenizer. What it adds: how many image tokens an image becomes (``image_token_count``), the expansion
of each image placeholder of a rendered text into that many tokens (``expand_image_tokens``, so token
counts, truncation and label masks see the real length), the pixel inputs of a list of images
(``pixel_inputs``) and saving the whole processor (``save_pretrained``), so an exported model loads with
``AutoProcessor``. An image is a file path or an already-open PIL image (the server's decoded uploads).
What differs between vision-language families (the processor's outputs the model takes, how many tokens an
image becomes) a family's subclass says: ``pixel_input_names`` and ``image_token_counts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from PIL import Image as PILImage

_OWN = ("processor", "tokenizer", "image_token", "span_tokens", "_count")
# The per-token modality the model's image inputs include (1: an image token), as transformers' processors name it.
MODALITY_INPUT = "mm_token_type_ids"

ImageInput = str | Path | PILImage.Image


class ImageError(ValueError):
    """An image that cannot be used: missing, unreadable, not an image."""


def load_image(image: ImageInput) -> PILImage.Image:
    """The image at a path (or a PIL image) as RGB, or an ImageError naming the path and the reason."""
    if isinstance(image, PILImage.Image):
        return image.convert("RGB")
    try:
        with PILImage.open(image) as opened:
            return opened.convert("RGB")
    except FileNotFoundError as error:
        raise ImageError(f"image {str(image)!r} does not exist") from error
    except (PILImage.UnidentifiedImageError, PILImage.DecompressionBombError, OSError) as error:
        raise ImageError(f"image {str(image)!r} cannot be read ({type(error).__name__}: {error})") from error


def image_from_bytes(data: bytes, what: str) -> PILImage.Image:
    """The encoded image ``data`` (PNG, JPEG, ...) as RGB, or an ImageError naming ``what`` it is."""
    from io import BytesIO

    try:
        with PILImage.open(BytesIO(data)) as opened:
            return opened.convert("RGB")
    except (PILImage.UnidentifiedImageError, PILImage.DecompressionBombError, OSError) as error:
        raise ImageError(f"{what} is not a readable image ({type(error).__name__}: {error})") from error


class ImageTextTokenizer:
    """``processor``: a Hugging Face processor with ``tokenizer``, ``image_processor`` and ``image_token``
    (one placeholder token per image in rendered text, expanded to the image's token count);
    ``span_tokens``: the tokens that open and close an image's tokens in rendered text (e.g.
    ``<|vision_start|>``, ``<|vision_end|>``), which belong to the image's span (``image_spans``).

    A family's subclass sets ``pixel_input_names`` (the image processor's outputs the model takes) and
    implements ``image_token_counts``."""

    pixel_input_names: tuple[str, ...]

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

    def image_token_counts(self, pixels: dict[str, torch.Tensor]) -> list[int]:
        """How many image tokens each image of ``pixels`` (``pixel_inputs``) becomes."""
        raise NotImplementedError

    def _image_token_count(self, image: ImageInput) -> int:
        try:
            [count] = self.image_token_counts(self.pixel_inputs([image]))
        except ValueError as error:  # the processor's refusal: an extreme aspect ratio, too small an image
            if isinstance(error, ImageError):
                raise
            raise ImageError(f"image {_named(image)} cannot be used by the model's image processor ({error})") from None
        return count

    def image_token_count(self, image: ImageInput) -> int:
        """How many image tokens ``image`` becomes (cached per path)."""
        if isinstance(image, PILImage.Image):
            return self._image_token_count(image)
        return self._count(str(image))

    def expand_image_tokens(self, text: str, images: Sequence[ImageInput]) -> str:
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

    def pixel_inputs(self, images: Sequence[ImageInput]) -> dict[str, torch.Tensor]:
        """The model's pixel inputs (``pixel_input_names``) of ``images``, in order."""
        out = self.processor.image_processor(images=[load_image(i) for i in images], return_tensors="pt")
        return {name: out[name] for name in self.pixel_input_names}

    def model_image_inputs(self, input_ids: torch.Tensor, images: Sequence[ImageInput]) -> dict[str, torch.Tensor]:
        """The model's image inputs for a batch of token ids whose image tokens belong, in row-major order,
        to ``images``: their pixel inputs and the per-token modality (1: image token); none for a batch
        without images. A ValueError when the ids hold another number of image tokens than the images make."""
        is_image = input_ids == self.image_token_id
        if not images:
            if is_image.any():
                raise ValueError(f"the token ids hold {int(is_image.sum())} image tokens but no image was given")
            return {}
        pixels = self.pixel_inputs(images)
        expected = sum(self.image_token_counts(pixels))
        if int(is_image.sum()) != expected:
            raise ValueError(
                f"the token ids hold {int(is_image.sum())} image tokens, the {len(images)} images make {expected} "
                "(was a prompt cut inside an image?)"
            )
        return {**pixels, MODALITY_INPUT: is_image.long()}

    def save_pretrained(self, out_dir: str | Path, **kwargs):
        return self.processor.save_pretrained(out_dir, **kwargs)


def _named(image: ImageInput) -> str:
    return f"{str(image)!r}" if not isinstance(image, PILImage.Image) else f"of size {image.size}"


def is_image_text(tokenizer) -> bool:
    return isinstance(tokenizer, ImageTextTokenizer)
