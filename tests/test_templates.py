import pytest

from kb_tvm.schedule_props import PROPERTY_NAMES
from kb_tvm.templates import Template, load_templates, parse_templates


@pytest.mark.parametrize("kind", ["llvm", "cuda"])
def test_shipped_templates_parse_and_bound_known_properties(kind):
    templates = load_templates(kind)
    assert len(templates) >= 4
    for template in templates:
        assert template.why and template.bounds
        assert set(template.bounds) <= set(PROPERTY_NAMES)


def test_cuda_templates_sort_kernels_as_documented():
    by_name = {t.name: t for t in load_templates("cuda")}
    big = {"threads_per_block": 512, "vector_lanes": 4, "shared_buffers": 2, "unroll_max_step": 16}
    small = {"threads_per_block": 64, "vector_lanes": 1, "shared_buffers": 0, "unroll_max_step": 1024}
    assert by_name["high-occupancy"].matches(big) and not by_name["high-occupancy"].matches(small)
    assert by_name["memory-friendly"].matches(big) and not by_name["memory-friendly"].matches(small)
    assert by_name["small-blocks"].matches(small) and by_name["ilp"].matches(small)


def test_a_user_template_directory_adds_regions_without_code(tmp_path):
    (tmp_path / "llvm.toml").write_text(
        '[[template]]\nname = "tiny-parallel"\nwhy = "at most 4 chunks"\nparallel_extent = { max = 4 }\n')
    (template,) = load_templates("llvm", tmp_path)
    assert template == Template("tiny-parallel", "at most 4 chunks", {"parallel_extent": (float("-inf"), 4.0)})
    with pytest.raises(ValueError, match="no templates for target kind 'cuda'"):
        load_templates("cuda", tmp_path)


@pytest.mark.parametrize("text, message", [
    ('[[template]]\nwhy = "x"\n', "needs a name"),
    ('[[template]]\nname = "a"\nwarps = { min = 1 }\n', "unknown property 'warps'"),
    ('[[template]]\nname = "a"\nvector_lanes = 4\n', "must be a table"),
    ('[[template]]\nname = "a"\n[[template]]\nname = "a"\n', "repeat"),
    ("[[template]\n", "not valid TOML"),
])
def test_bad_template_files_are_one_line_errors(text, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_templates(text, "mine.toml")
    assert str(err.value).startswith("mine.toml") and "\n" not in str(err.value)
