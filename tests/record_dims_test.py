"""``recording.dims.find_dims``, the dims of one recorded call, as a pure function: which axes are
one dim, what each shrinks to, which ints follow a dim, and which keys the probe may join."""
from __future__ import annotations

from typing import Any

from gradverify.recording.dims import find_dims
from gradverify.recording.spool import Observation


def _tensor(name: str, shape: list[int], dtype: str = "float32", **facts: Any) -> dict[str, Any]:
    return {"name": name, "kind": "tensor", "shape": shape, "dtype": dtype, "layout": "strided",
            "requires_grad": dtype.startswith("float"), **facts}


def _value(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "kind": "value", "value": value}


def test_a_batch_of_4_and_4_heads_stay_two_dims_until_size_4_is_joined():
    heads = Observation("m.F", (_tensor("x", [4, 4, 64]), _tensor("y", [4, 64])))
    split = find_dims(heads, frozenset())
    assert split.recorded == {"N": 4, "C": 4, "L": 64}
    assert split.sizes == {"N": 2, "C": 3, "L": 4}  # shrunk, and still all different
    assert split.axis_names == {("x", -3): "N", ("x", -2): "C", ("x", -1): "L",
                                ("y", -2): "C", ("y", -1): "L"}
    assert split.keys == ("lead:4", "size:4")
    joined = find_dims(heads, frozenset({"size:4"}))
    assert joined.recorded == {"N": 4, "C": 64}
    assert joined.sizes == {"N": 4, "C": 5}  # a dim recorded at most KEPT_SIZE long keeps it
    assert joined.keys == ()


def test_an_int_equal_to_a_size_follows_its_dim_only_where_joined():
    call = Observation("m.F", (_tensor("x", [16, 64]), _value("seq_len", 16), _value("bits", 8)))
    kept = find_dims(call, frozenset())
    assert kept.keys == ("int:seq_len",) and kept.int_dims == {}
    # seq_len (16) and bits (8) keep their values, so every dim recorded above them stays
    # above, and one recorded at least twice as large stays so (C: 64 > 2 * 16)
    assert kept.sizes == {"N": 9, "C": 33}
    tied = find_dims(call, frozenset({"int:seq_len"}))
    assert tied.int_dims == {"seq_len": "N"}
    assert tied.sizes == {"N": 9, "C": 17}


def test_a_count_that_integer_values_index_is_a_dim_of_its_own():
    call = Observation("m.F", (_tensor("src", [100, 8]),
                               _tensor("index", [100], "int64", min=0, max=9),
                               _value("num_segments", 10)))
    found = find_dims(call, frozenset())
    assert found.recorded == {"N": 100, "C": 8, "L": 10}
    assert found.int_dims == {"num_segments": "L"}
    assert found.dims_of == {10: "L", 8: "C", 100: "N"}


def test_forwards_defaults_keep_the_dims_above_them_above_them():
    plain = Observation("m.F", (_tensor("scores", [64, 16]),))
    assert find_dims(plain, frozenset()).sizes == {"N": 3, "C": 2}
    block = Observation("m.F", (_tensor("scores", [64, 16]),), defaults={"block": 6})
    assert find_dims(block, frozenset()).sizes == {"N": 14, "C": 13}  # two blocks of 6


def test_a_dim_recorded_as_two_blocks_or_more_keeps_two_blocks():
    """A comb's delay of 40 echoes 6 times in 256 samples: shrunk, it still echoes twice (a
    backward that keeps only the last echo fails there); a signal of 60 held one echo: 41."""
    def signal(t: int) -> dict:
        call = Observation("m.F", (_tensor("x", [8, t]), _value("delay", 40)))
        return find_dims(call, frozenset()).sizes

    assert signal(256) == {"N": 2, "C": 81}
    assert signal(60) == {"N": 2, "C": 41}
