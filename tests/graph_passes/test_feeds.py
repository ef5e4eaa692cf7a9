"""graph_passes.feeds: real inputs from .npz files and data-loader scripts, checked against the model's inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graph_passes.errors import UserError
from graph_passes.feeds import InputSpec, load_feeds, load_npz_feeds, load_script_feeds, model_input_specs


def _model():
    vi = helper.make_tensor_value_info
    inputs = [vi("input_ids", TensorProto.INT64, ["batch", "seq"]), vi("x", TensorProto.FLOAT, [None, 8]),
              vi("w", TensorProto.FLOAT, [8, 4])]  # w: an overridable weight (also an initializer)
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", inputs,
                              [vi("y", TensorProto.FLOAT, [None, 4])], initializer=[w])
    return helper.make_model(graph)


SPECS = [InputSpec("input_ids", np.dtype(np.int64), ("batch", "seq")), InputSpec("x", np.dtype(np.float32), (None, 8))]


def test_model_input_specs_skip_initializers():
    assert model_input_specs(_model()) == SPECS


def _npz(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return str(path)


def test_npz_samples_keep_the_batch_axis_and_cast_within_kind(tmp_path, rng):
    ids = rng.integers(0, 100, (5, 2, 7)).astype(np.int32)
    x = rng.standard_normal((5, 3, 8))  # float64: cast to the model's float32
    feeds = load_npz_feeds(_npz(tmp_path, input_ids=ids, x=x), SPECS)
    assert len(feeds) == 5
    for i, f in enumerate(feeds):
        assert f["input_ids"].dtype == np.int64 and f["input_ids"].shape == (2, 7)
        np.testing.assert_array_equal(f["input_ids"], ids[i])
        assert f["x"].dtype == np.float32
        np.testing.assert_array_equal(f["x"], x[i].astype(np.float32))
    assert len(load_npz_feeds(_npz(tmp_path, input_ids=ids, x=x), SPECS, limit=2)) == 2


@pytest.mark.parametrize("options", [("--data", "--data-script", "--samples"),
                                     ("--calib-data", "--calib-script", "--calib-samples")])
def test_a_sample_count_below_one_names_its_option(tmp_path, rng, options):
    path = _npz(tmp_path, input_ids=rng.integers(1, 100, (3, 2, 7)), x=rng.standard_normal((3, 2, 8)))
    for limit in (0, -2):
        with pytest.raises(UserError, match=rf"^{options[2]} {limit}: must be >= 1$"):
            load_feeds(path, None, SPECS, limit, options=options)


@pytest.mark.parametrize("arrays,match", [
    (dict(x=np.zeros((2, 1, 8))), "no array for input input_ids"),
    (dict(input_ids=np.zeros((2, 1, 3), np.int64), x=np.zeros((2, 1, 8)), z=np.zeros(2)), "z is not a data input"),
    (dict(input_ids=np.zeros((2, 1, 3)), x=np.zeros((2, 1, 8))), "float64 data for a int64 input"),
    (dict(input_ids=np.zeros((2, 1, 3, 4), np.int64), x=np.zeros((2, 1, 8))), r"input input_ids: shape \[1, 3, 4\]"),
    (dict(input_ids=np.zeros((2, 1, 3), np.int64), x=np.zeros((2, 1, 5))), r"does not match the model's \['\?', 8\]"),
    (dict(input_ids=np.zeros((0, 1, 3), np.int64), x=np.zeros((0, 1, 8))), "no samples"),
    (dict(input_ids=np.zeros((2, 1, 3), np.int64), x=np.zeros((3, 1, 8))), "different numbers of samples"),
    (dict(input_ids=np.full((1, 1, 3), 2**40, np.int64), x=np.zeros((1, 1, 8))), None),
    (dict(input_ids=np.zeros((1, 3), np.int64), x=np.zeros((1, 8))),
     r"input input_ids: shape \[1, 3\] has the model's rank 2, but the first axis counts the samples: save "
     r"input_ids\[None\]"),
    (dict(input_ids=np.zeros((2, 1, 3), np.int64), x=np.zeros((2, 1, 8)), w=np.zeros((2, 8, 4))),
     "w is not a data input of the model"),
])
def test_npz_refusals_name_file_and_input(tmp_path, arrays, match):
    path = _npz(tmp_path, **arrays)
    if match is None:  # int64 values beyond int32 are fine for an int64 input
        assert load_npz_feeds(path, SPECS)[0]["input_ids"][0, 0] == 2**40
        return
    with pytest.raises(UserError, match=match) as err:
        load_npz_feeds(path, SPECS)
    assert str(err.value).startswith(path)


def test_npz_samples_of_different_shapes(tmp_path):
    """Samples of different lengths cannot share one array: numpy stores them as an object array, which the
    message explains (instead of numpy's allow_pickle advice)."""
    ragged = np.empty(2, object)
    ragged[0], ragged[1] = np.zeros((1, 3), np.int64), np.zeros((1, 5), np.int64)
    path = _npz(tmp_path, input_ids=ragged, x=np.zeros((2, 1, 8)))
    with pytest.raises(UserError, match="samples of different shapes.*data script") as err:
        load_npz_feeds(path, SPECS)
    assert "allow_pickle" not in str(err.value)


def test_npz_unreadable_and_missing(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_npz_feeds(tmp_path / "none.npz", SPECS)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(UserError, match="not a readable .npz"):
        load_npz_feeds(bad, SPECS)
    not_npz = tmp_path / "model.onnx"  # numpy would read it as a pickle and suggest allow_pickle
    not_npz.write_bytes(b"\x08\x07\x12\x04onnx")
    with pytest.raises(UserError, match=r"not an \.npz file; save one array per input with numpy\.savez") as err:
        load_npz_feeds(not_npz, SPECS)
    assert "pickle" not in str(err.value)
    small = [InputSpec("ids", np.dtype(np.int32), (4,))]
    with pytest.raises(UserError, match="values .* do not fit int32"):
        load_npz_feeds(_npz(tmp_path, ids=np.full((1, 4), 2**40, np.int64)), small)


def _script(tmp_path, body, name="loader.py"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_script_default_and_named_function_read_lazily(tmp_path):
    body = ("import numpy as np\n"
            "def load_data():\n"
            "    for i in range(1000):\n"
            "        if i == 3:\n"
            "            raise RuntimeError('read past the limit')\n"
            "        yield {'input_ids': np.full((1, 4), i), 'x': np.full((2, 8), float(i))}\n"
            "def two():\n"
            "    return [{'input_ids': np.zeros((1, 4), np.int64), 'x': np.ones((1, 8), np.float32)}] * 2\n")
    path = _script(tmp_path, body)
    feeds = load_script_feeds(path, SPECS, limit=3)
    assert [int(f["input_ids"][0, 0]) for f in feeds] == [0, 1, 2]
    assert feeds[2]["x"].dtype == np.float32 and feeds[2]["input_ids"].dtype == np.int64
    assert len(load_script_feeds(f"{path}:two", SPECS)) == 2


@pytest.mark.parametrize("body,spec,match", [
    ("raise RuntimeError('no dataset here')\n", "", "failed to import: RuntimeError: no dataset here"),
    ("import not_a_module_xyz\n", "", "failed to import: ModuleNotFoundError"),
    ("def load_data():\n    raise ValueError('bad\\nsplit')\n", "", "failed: ValueError: bad split"),
    ("def load_data():\n    return 3\n", "", "returned int, not an iterable of feed dicts"),
    ("def load_data():\n    return None\n", "", "returned NoneType, not an iterable of feed dicts"),
    ("import numpy as np\ndef load_data():\n    return {'input_ids': np.zeros((1, 4), np.int64)}\n",
     "", r"returned one dict: return a list of feed dicts \(\[feed\] for one sample\) or yield each"),
    ("def load_data():\n    return [[1, 2]]\n", "", r"sample 0\): expected a dict"),
    ("def load_data():\n    return []\n", "", "returned no samples"),
    ("def other():\n    return []\n", ":missing", r"no function missing\(\)"),
    ("import numpy as np\ndef load_data():\n    return [{'input_ids': np.zeros((1, 4)), 'x': np.zeros((1, 8))}]\n",
     "", r"sample 0\): input input_ids: float64 data for a int64 input"),
])
def test_script_errors_are_one_line_user_errors(tmp_path, body, spec, match):
    path = _script(tmp_path, body)
    with pytest.raises(UserError, match=match) as err:
        load_script_feeds(path + spec, SPECS)
    assert "\n" not in str(err.value) and str(err.value).startswith(path)


def test_script_missing_and_limit(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_script_feeds(str(tmp_path / "none.py"), SPECS)
    with pytest.raises(UserError, match="must be >= 1"):
        load_script_feeds(str(tmp_path / "none.py"), SPECS, limit=0)


def test_script_imports_the_helpers_beside_it(tmp_path):
    """As under ``python FILE.py``, the script's own folder is importable, also from a generator run later; it is
    off sys.path again afterwards."""
    import sys

    folder = tmp_path / "loaders"
    folder.mkdir()
    (folder / "loader_helper_tokens.py").write_text(
        "import numpy as np\nIDS = np.arange(6, dtype=np.int64).reshape(2, 3)\n")
    (folder / "load.py").write_text("import numpy as np\nfrom loader_helper_tokens import IDS\n"
                                    "def load_data():\n    from loader_helper_tokens import IDS as late\n"
                                    "    yield {'input_ids': late, 'x': np.zeros((1, 8))}\n")
    feeds = load_script_feeds(str(folder / "load.py"), SPECS)
    np.testing.assert_array_equal(feeds[0]["input_ids"], np.arange(6).reshape(2, 3))
    assert str(folder) not in sys.path
    sys.modules.pop("loader_helper_tokens", None)
