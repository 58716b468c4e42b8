"""Templates from a released repository's Python files, read with their sha256; rpbench's defaults otherwise."""

import hashlib
import re
import textwrap

import pytest

from rpbench.data.templates import Released, TemplateError, resolve, slots_of

RELEASED = textwrap.dedent(
    '''
    system_prompt = """Be {role}, briefly."""
    base = """
    ## Persona
    {user_persona}
    """

    def build(x, y):
        prompt = f"plain {x}"
        prompt = f"<P>{x}</P>\\n<D>{y}</D>"
        fill(golden="no {reference} given")
        message = {"messages": [{"role": "assistant", "content": f"## Reply\\n{y}"}]}
        aspects = {"tone": f"Tone: is it {x}'s?", "fluency": "Fluency: is it smooth?"}
        text = f"Judge {aspects[key]} of {y}"
        return prompt, message
    '''
)


@pytest.fixture
def clone(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "prompts.py").write_text(RELEASED, encoding="utf-8")
    return tmp_path


def test_default_when_no_source():
    t = resolve("greeting", "Hello {name}.", Released("pkg/prompts.py", "system_prompt"), None)
    assert (t.origin, t.text, t.slots) == ("rpbench", "Hello {name}.", ("name",))
    assert t.record() == {"origin": "rpbench", "sha256": hashlib.sha256(b"Hello {name}.").hexdigest()}


def test_string_constant_is_a_format_template(clone):
    t = resolve("system", "Act as {role}.", Released("pkg/prompts.py", "system_prompt"), clone)
    assert t.text == "Be {role}, briefly."
    assert t.render(role="Holmes") == "Be Holmes, briefly."
    assert t.origin == "pkg/prompts.py:system_prompt"
    assert t.sha256 == hashlib.sha256(b"Be {role}, briefly.").hexdigest()


def test_fstring_in_a_function_by_occurrence_with_renamed_slots(clone):
    ref = Released("pkg/prompts.py", "prompt", occurrence=1, rename={"x": "persona", "y": "dialogue"})
    t = resolve("user", "{persona} | {dialogue}", ref, clone)
    assert t.text == "<P>{persona}</P>\n<D>{dialogue}</D>"
    assert t.render(persona="a {b}", dialogue="c") == "<P>a {b}</P>\n<D>c</D>"
    assert t.origin == "pkg/prompts.py:prompt#1"


def test_keyword_argument(clone):
    t = resolve("filler", "none: {reference}", Released("pkg/prompts.py", "golden"), clone)
    assert t.render(reference="x") == "no x given"


def test_the_single_fstring_inside_a_container(clone):
    t = resolve("target", "R: {response}", Released("pkg/prompts.py", "message", rename={"y": "response"}), clone)
    assert t.render(response="hi") == "## Reply\nhi"


@pytest.mark.parametrize(
    "ref, default, message",
    [
        (Released("pkg/missing.py", "system_prompt"), "{role}", "no such file"),
        (Released("pkg/prompts.py", "nothing"), "{role}", "0 assignment(s) to 'nothing'"),
        (Released("pkg/prompts.py", "prompt", occurrence=2), "{x}", "wanted number 3"),
        (Released("pkg/prompts.py", "system_prompt"), "{persona}", "has slots ['role']"),
    ],
)
def test_named_errors(clone, ref, default, message):
    with pytest.raises(TemplateError, match=re.escape(message)) as error:
        resolve("t", default, ref, clone)
    assert "pkg" in str(error.value)


def test_render_checks_slots():
    t = resolve("t", "{a} and {b}", None, None)
    with pytest.raises(TemplateError, match=r"missing \['b'\], unknown \['c'\]"):
        t.render(a=1, c=2)
    assert slots_of("{a}{{literal}}{a}{b}") == ("a", "b")


def test_a_dict_entry_by_key_and_an_expression_field_named_in_rename(clone):
    t = resolve(
        "tone", "Tone of {role}?", Released("pkg/prompts.py", "aspects", key="tone", rename={"x": "role"}), clone
    )
    assert (t.text, t.origin) == ("Tone: is it {role}'s?", "pkg/prompts.py:aspects['tone']")
    assert resolve("fluency", "Smooth?", Released("pkg/prompts.py", "aspects", key="fluency"), clone).text == (
        "Fluency: is it smooth?"
    )
    ref = Released("pkg/prompts.py", "text", rename={"aspects[key]": "aspect", "y": "reply"})
    assert resolve("body", "{aspect} / {reply}", ref, clone).text == "Judge {aspect} of {reply}"
    with pytest.raises(TemplateError, match=r"field 'aspects\[key\]' is an expression"):
        resolve("body", "{aspect} / {reply}", Released("pkg/prompts.py", "text"), clone)
    with pytest.raises(TemplateError, match="has no key 'pace'"):
        resolve("pace", "x", Released("pkg/prompts.py", "aspects", key="pace"), clone)


BROKEN_FILES = {  # a broken authors.py, by its contents
    "not UTF-8": b'PROMPT = "\xff\xfe {role} {topic}"\n',
    "null bytes": b'PROMPT = "{role} {topic}"\x00\n',
    "not Python": b"PROMPT = (\n",
    "empty": b"",
    "wrong slots": b'PROMPT = "Talk as {role} about {subject}."\n',
    "unbalanced brace": b'PROMPT = "Talk as {role about {topic}."\n',
    "slot not a plain name": b'PROMPT = "Talk as {role.name} about {topic}."\n',
    "f-string expression": b'PROMPT = f"Talk as {role.upper()} about {topic}."\n',
    "not a string": b"PROMPT = 3\n",
}


def _clone_with(tmp_path, shape):
    """A clone whose authors.py (the template's file) is broken in one way."""
    clone = tmp_path / "clone"
    clone.mkdir()
    target = clone / "authors.py"
    good = 'PROMPT = "Talk as {role} about {topic}."\n'
    if shape in BROKEN_FILES:
        target.write_bytes(BROKEN_FILES[shape])
    elif shape == "a folder":
        target.mkdir()
    elif shape == "link outside the clone":
        outside = tmp_path / "outside.py"
        outside.write_text(good)
        target.symlink_to(outside)
    elif shape == "clone is a file":
        clone.rmdir()
        clone.write_text(good)
    return clone, target


@pytest.mark.parametrize(
    "shape",
    ["missing", "a folder", *BROKEN_FILES, "link outside the clone", "clone is a file"],
)
def test_a_broken_template_clone_is_a_user_error_naming_the_file(tmp_path, shape):
    from rpbench.core.errors import RpbenchError

    clone, target = _clone_with(tmp_path, shape)
    with pytest.raises(RpbenchError) as raised:
        resolve("talk", "As {role}, on {topic}.", Released("authors.py", "PROMPT"), clone)
    assert str(target) in str(raised.value)


def test_a_link_inside_the_clone_is_read(tmp_path):
    clone = tmp_path / "clone"
    (clone / "real").mkdir(parents=True)
    (clone / "real" / "authors.py").write_text('PROMPT = "Talk as {role} about {topic}."\n')
    (clone / "authors.py").symlink_to(clone / "real" / "authors.py")
    template = resolve("talk", "As {role}, on {topic}.", Released("authors.py", "PROMPT"), clone)
    assert template.render(role="a", topic="b") == "Talk as a about b."
