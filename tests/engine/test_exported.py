"""Exported programs (shearbatch/engine/exported.py): a later process loads the campaign's traced
programs instead of tracing them again.

A "later process" here is this process with its memory of exported programs cleared
(:func:`shearbatch.engine.exported.clear_memory`): the model's ``fit`` is then provably not traced
(counted); the two-process case, with the persistent compilation cache hit it leads to,
is tests/engine/test_engine_map.py::test_second_process_hits_the_persistent_cache (two bias-run
processes). The exported program's results equal the plain jit's to the bit; a corrupt,
truncated or stale file, or a program that cannot be exported, falls back to the jit
with one log line; every setting of the program changes its key.
"""

import logging

import jax
import numpy as np
import pytest

import shearbatch.core.methods.map as map_
from shearbatch.campaign import plan_campaign
from shearbatch.core.checks import chi2_program
from shearbatch.core.methods import MethodSpec
from shearbatch.core.methods.vi import ViConfig
from shearbatch.engine import exported, runtime
from shearbatch.engine.loop import batch_inputs, build_program, inference_program
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import count_calls, write_config

TINY = {"image.size_x": 16, "image.size_y": 16, "gal.half_light_radius": 0.3}


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = write_config(tmp_path_factory.mktemp("exported") / "tiny.yaml", TINY)
    return run_spec(load_config(path))


@pytest.fixture(scope="module")
def inputs(spec):
    with runtime.scoped():
        exported.use(None)
        sim, keys = batch_inputs(spec, plan_campaign([0.01, 0.02], n_realizations=1))
    return sim, keys


@pytest.fixture(scope="module")
def plain(spec, inputs):
    """The program's result with the plain jit (no store)."""
    sim, keys = inputs
    with runtime.scoped():
        exported.use(None)
        _, program = inference_program(spec)
        assert not isinstance(program, exported.Exportable)
        return jax.tree.map(np.asarray, program(keys, sim.images))


@pytest.fixture
def store(tmp_path):
    """A fresh store, as runtime.configure sets one; the process's memory of exported
    programs is cleared before and after."""
    with runtime.scoped():
        exported.clear_memory()
        exported.use(tmp_path / "exported")
        yield tmp_path / "exported"
    exported.clear_memory()


def _equal(a, b) -> bool:
    same = jax.tree.map(lambda x, y: np.array_equal(x, y, equal_nan=True), a, b)
    return jax.tree.structure(a) == jax.tree.structure(b) and all(jax.tree.leaves(same))


def test_a_later_load_does_not_trace_and_equals_the_jit(spec, inputs, plain, store, monkeypatch):
    sim, keys = inputs
    traces = count_calls(monkeypatch, map_, "fit")
    _, first = inference_program(spec)
    assert isinstance(first, exported.Exportable)
    out = first(keys, sim.images)
    assert len(traces) == 1 and exported.STATS["exported"] == 1
    (blob,) = store.glob("*.bin")
    assert _equal(jax.tree.map(np.asarray, out), plain)

    exported.clear_memory()  # as a new process of the same campaign
    built = build_program(spec)
    again = built.program(keys, sim.images)
    assert len(traces) == 1, "the stored program was traced again"
    assert exported.STATS["loaded"] == 1 and exported.STATS["exported"] == 0
    assert type(again.info) is map_.MapInfo  # the outputs' NamedTuples come back
    assert _equal(jax.tree.map(np.asarray, again), plain)
    assert list(store.glob("*.bin")) == [blob]

    # ahead of time (bias-run's compile step): the same stored program, not traced
    exported.clear_memory()
    compiled = build_program(spec).program.lower(keys, sim.images).compile()
    assert len(traces) == 1 and exported.STATS["loaded"] == 1
    assert _equal(jax.tree.map(np.asarray, compiled(keys, sim.images)), plain)


def test_generator_and_check_programs_are_stored_too(spec, inputs, plain, store):
    sim, _ = inputs
    plan = plan_campaign([0.01, 0.02], n_realizations=1)
    from shearbatch.core import generate as gen

    gen._SIMULATORS.clear()
    exported.clear_memory()
    got, _ = batch_inputs(spec, plan)
    assert exported.STATS["exported"] == 1
    np.testing.assert_array_equal(got.images, sim.images)
    check = chi2_program(spec.model, store=exported.exportable)  # as the engine builds it
    chi2 = np.asarray(check(plain.samples, sim.images))
    assert exported.STATS["exported"] == 2 and len(list(store.glob("*.bin"))) == 2

    gen._SIMULATORS.clear()
    exported.clear_memory()
    again, _ = batch_inputs(spec, plan)
    np.testing.assert_array_equal(again.images, sim.images)
    np.testing.assert_array_equal(
        chi2_program(spec.model, store=exported.exportable)(plain.samples, sim.images), chi2
    )
    assert exported.STATS["loaded"] == 2 and exported.STATS["exported"] == 0
    with runtime.scoped():
        exported.use(None)  # no store set: the wrapper runs the plain jit
        np.testing.assert_array_equal(
            chi2_program(spec.model, store=exported.exportable)(plain.samples, sim.images), chi2
        )


@pytest.mark.parametrize("damage", ["garbage", "truncated", "stale"])
def test_a_bad_file_is_traced_again_and_replaced(spec, inputs, plain, store, damage, caplog):
    sim, keys = inputs
    _, program = inference_program(spec)
    program(keys, sim.images)
    (blob,) = store.glob("*.bin")
    good = blob.read_bytes()
    if damage == "garbage":
        blob.write_bytes(b"\x00not a program" * 100)
    elif damage == "truncated":  # a file cut short (the header's checksum no longer holds)
        blob.write_bytes(good[: len(good) - 1000])
    else:  # another program's file under this key (an older format or key scheme)
        other = exported.program_key({"program": "another"}, (keys,))
        blob.write_bytes(good.replace(blob.stem.encode(), other.encode(), 1))
    damaged = blob.read_bytes()
    exported.clear_memory()
    with caplog.at_level(logging.WARNING, logger="shearbatch.engine.exported"):
        _, program = inference_program(spec)
        out = jax.tree.map(np.asarray, program(keys, sim.images))
    assert _equal(out, plain)
    (line,) = [r.getMessage() for r in caplog.records
                if r.name == "shearbatch.engine.exported" and r.levelno >= logging.WARNING]  # fmt: skip
    assert "cannot be used" in line and "tracing it again" in line, line
    assert exported.STATS["exported"] == 1 and blob.read_bytes() != damaged
    exported._read(blob, blob.stem)  # replaced by a good file


def test_a_program_that_cannot_be_exported_runs_with_jit(spec, inputs, plain, store, monkeypatch,
                                                         caplog):  # fmt: skip
    sim, keys = inputs

    def refuse(*a, **k):
        raise ValueError("Cannot serialize code with custom calls (a test)")

    monkeypatch.setattr(jax.export, "export", refuse)
    with caplog.at_level(logging.WARNING, logger="shearbatch.engine.exported"):
        _, program = inference_program(spec)
        out = jax.tree.map(np.asarray, program(keys, sim.images))
    assert _equal(out, plain)
    assert exported.STATS["fallback"] == 1 and not list(store.glob("*.bin"))
    (line,) = [r.getMessage() for r in caplog.records
                if r.name == "shearbatch.engine.exported" and r.levelno >= logging.WARNING]  # fmt: skip
    assert "cannot be exported" in line and "traced with jit instead" in line


def test_export_off_and_no_store_give_the_plain_jit(spec, store, monkeypatch):
    assert isinstance(inference_program(spec)[1], exported.Exportable)
    monkeypatch.setenv(exported.ENV, "off")
    assert exported.store() is None
    assert not isinstance(inference_program(spec)[1], exported.Exportable)
    monkeypatch.delenv(exported.ENV)
    with runtime.scoped():
        runtime.configure(True, "off")
        assert exported.store() is None
    assert exported.store() == store  # scoped() restored it


def test_every_setting_of_the_program_changes_its_key(spec, inputs, store):
    sim, keys = inputs
    args = (keys, sim.images)

    def key(s=spec, chunk=None, a=args):
        return exported.program_key(inference_program(s, chunk=chunk)[1].what, a)

    base = key()
    assert key() == base  # deterministic
    inf = spec.inference
    steps = inf._replace(settings=inf.settings.model_copy(update={"num_steps": 17}))
    vi = MethodSpec("vi", ViConfig(), (("map_config", inf.settings),))
    noisier = spec.model._replace(noise_sigma=2 * spec.model.noise_sigma)
    wider = (jax.ShapeDtypeStruct((4, *keys.shape[1:]), keys.dtype),
             jax.ShapeDtypeStruct((4, *sim.images.shape[1:]), sim.images.dtype))  # fmt: skip
    single = (keys, jax.ShapeDtypeStruct(sim.images.shape, np.float32))
    others = [key(spec._replace(inference=steps)), key(spec._replace(model=noisier)),
              key(spec._replace(inference=vi)), key(chunk=1), key(a=wider), key(a=single)]  # fmt: skip
    assert len({base, *others}) == 1 + len(others)
    # the truth problem (the generator's), the seed list and the output root are not the
    # inference program's: the same key
    assert key(spec._replace(truth=noisier)) == base
    # a change to the package's source, or to a JAX flag read while tracing
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exported, "source_hash", lambda: "edited")
        assert key() != base
    assert key() == base
    with jax.default_matmul_precision("highest"):
        assert key() != base
