"""Bad input, systematically: every case exits 2 with one line naming the key, flag or
file, no traceback, and nothing written or overwritten (through the real click commands).

Damaged realization files are not bad input to bias-extract: they are per-realization
statuses (``corrupt``), and the table is still written. Property-based tests mutate a
valid config and the bias-run flags at random: accepted, or refused with a message
naming a key or flag, never a traceback.
"""

import copy
import math
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.schema import ConfigError, parse_config
from tests.conftest import LEVEL0, write_config

SMALL = {"image.size_x": 16, "image.size_y": 16}
BASE = yaml.safe_load(LEVEL0.read_text())


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


def assert_refused(res, needle: str) -> None:
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    assert needle in lines[0], lines[0]
    assert "Traceback" not in res.output


@pytest.fixture(scope="module")
def ws(module_tmp):
    """A workspace: a good config, a file, a real tiny campaign and its summary.csv."""
    good = write_config(module_tmp / "good.yaml", SMALL)
    (module_tmp / "afile").write_text("not a directory\n")
    camp = module_tmp / "camp"
    args = ["--config", good, "--shear-grid", "0.01", "0.02", "--n-realizations", "2",
            "--batch-size", "4", "--no-progress", "--output-dir", str(camp)]  # fmt: skip
    res = CliRunner().invoke(bias_run, args)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output",
                                            str(module_tmp / "summary.csv")])  # fmt: skip
    assert res.exit_code == 0, res.output
    return module_tmp


# --------------------------------------------------------------------------- bias-run

CONFIG_CASES = [
    ({"image.size_x": True}, "image.size_x"),
    ({"image.size_x": 0}, "image.size_x"),
    ({"image.size_y": 16.5}, "image.size_y"),
    ({"image.pixel_scale": -1}, "image.pixel_scale"),
    ({"image.noise": {"sigma": 1e-3, "snr": 30}}, "image.noise"),
    ({"image.noise": {"type": "Poisson", "sigma": 1}}, "image.noise.type"),
    ({"image.fft_size": 12}, "image.fft_size"),
    ({"image.alias_band": 1.0}, "image.alias_band"),
    ({"psf.sigma": "wide"}, "psf.sigma"),
    ({"psf.sigma": 0}, "psf.sigma"),
    ({"gal.flux": False}, "gal.flux"),
    ({"gal.half_light_radius": {"type": "Normal", "mean": 0.5, "sigma": 0.1}},
     "gal.half_light_radius"),
    ({"gal.type": "Spiral"}, "gal.type"),
    ({"gal.shear.type": "Flat"}, "gal.shear.type"),
    ({"gal.shear.g1": {"type": "Normal", "sigma": 0.1}}, "gal.shear"),
    ({"gal.ellipticity": {"e1": 1.2}}, "gal.ellipticity.e1"),
    ({"gal.position": {"x_min": 0.6, "x_max": 0.4, "y_min": 0.4, "y_max": 0.6}}, "gal.position"),
    ({"imagee": 1}, "imagee"),
    ({"image.nosie": 1}, "image.nosie"),
    ({"inference.method": "hmc"}, "inference.method"),
    ({"inference.precision": "float16"}, "inference.precision"),
    ({"inference.map_config.num_steps": 0}, "inference.map_config.num_steps"),
    ({"inference.map_config.tol": 1e-3}, "inference.map_config: tol: 0.001 lets a fit stop"),
    ({"campaign.batch_size": 0}, "campaign.batch_size"),
    ({"campaign.shear_grid": [1.5]}, "campaign.shear_grid"),
    ({"campaign.base_seed": -1}, "campaign.base_seed"),
    ({"simulation.psf": {"sigma": -1}}, "simulation.psf.sigma"),
]  # fmt: skip

YAML_CASES = [
    ("", "config: top level must be a mapping"),
    ("- 1\n- 2\n", "config: top level must be a mapping"),
    ("image:\n\tsize_x: 16\n", "invalid YAML (line 2"),
    (LEVEL0.read_text() + "psf: {sigma: 0.5}\n", "duplicate key 'psf'"),
    ("image: [1, 2\n", "invalid YAML"),
]


def _run_refused(ws, args, needle, out=None):
    out = out or ws / "out"
    before = snapshot(ws)
    res = CliRunner().invoke(bias_run, [*args, "--no-progress"] + (
        [] if "--output-dir" in args else ["--output-dir", str(out)]))  # fmt: skip
    assert_refused(res, needle)
    assert snapshot(ws) == before  # nothing written or overwritten
    assert not out.exists() or out.is_file()


@pytest.mark.parametrize(("edits", "needle"), CONFIG_CASES, ids=[n for _, n in CONFIG_CASES])
def test_bias_run_refuses_bad_config(ws, edits, needle):
    cfg = write_config(ws / "bad.yaml", {**SMALL, **edits})
    _run_refused(ws, ["--config", cfg, "--shear-grid", "0.01"], needle)


@pytest.mark.parametrize(("text", "needle"), YAML_CASES,
                         ids=["empty", "list", "tabs", "duplicate-key", "syntax"])  # fmt: skip
def test_bias_run_refuses_malformed_yaml(ws, text, needle):
    (ws / "bad.yaml").write_text(text)
    _run_refused(ws, ["--config", str(ws / "bad.yaml"), "--shear-grid", "0.01"], needle)


FLAG_CASES = [
    (["--shear-grid", "0.01", "--seed", "3"], "--run-id/--seed"),
    (["--shear-grid", "0.01", "--array-task-id", "2", "--array-task-count", "2"],
     "--array-task-id"),
    (["--shear-grid", "0.01", "--array-task-id", "0"], "--array-task-id and --array-task-count"),
    (["--shear-grid", "0.01", "--array-task-id", "0", "--array-task-count", "0"],
     "--array-task-count"),
    (["--shear-grid", "1.0"], "--shear-grid"),
    (["--shear-grid", "nan"], "--shear-grid"),
    (["--g1-true", "1.2"], "--g1-true"),
    (["--g1-true", "0.6", "--g2-true", "0.9"], "--g1-true/--g2-true"),
    (["--g1-true", "0.1", "--shear-grid", "0.2"], "--g1-true and --shear-grid"),
    (["--shear-grid", "0.01", "--batch-size", "0"], "--batch-size"),
    (["--shear-grid", "0.01", "--batch-size", "abc"], "--batch-size"),
    (["--shear-grid", "0.01", "--n-realizations", "-1"], "--n-realizations"),
    (["--shear-grid", "0.01", "--n-realizations", "1000000000000"], "--n-realizations"),
    (["--shear-grid", "0.01", "--base-seed", "-2"], "--base-seed"),
    (["--shear-grid", "0.01", "--method", "hmc"], "--method"),
    (["--shear-grid", "0.01", "--lane-chunk", "wide"], "--lane-chunk"),
    (["--shear-grid", "0.01", "--lane-chunk", "0"], "--lane-chunk"),
    (["--shear-grid", "0.01", "--bogus"], "--bogus"),
    (["--g1-true", "0.01", "--run-id", "a/b"], "--run-id"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "needle"), FLAG_CASES, ids=[n for _, n in FLAG_CASES])
def test_bias_run_refuses_bad_flags(ws, flags, needle):
    _run_refused(ws, ["--config", str(ws / "good.yaml"), *flags], needle)


def test_bias_run_refuses_bad_output_dirs(ws):
    good = ["--config", str(ws / "good.yaml"), "--shear-grid", "0.01"]
    _run_refused(ws, [*good, "--output-dir", str(ws / "afile")], "--output-dir")
    _run_refused(ws, [*good, "--output-dir", str(ws / "afile" / "sub")], "--output-dir")
    # a root holding another campaign (the hlr differs: another config hash)
    other = write_config(ws / "other.yaml", {**SMALL, "gal.half_light_radius": 0.6})
    _run_refused(ws, ["--config", other, "--shear-grid", "0.01", "--output-dir",
                      str(ws / "camp")], "--config (config hash)")  # fmt: skip
    # a damaged manifest is named, not parsed into a traceback
    broken = ws / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "campaign.json").write_text('{"plan": ')
    _run_refused(ws, [*good, "--output-dir", str(broken)], "campaign.json: not valid JSON")


def _as_unprivileged(args: list[str], home: Path) -> subprocess.CompletedProcess:
    """``bias-run ARGS`` in a subprocess as the unprivileged user ``nobody`` (root writes
    through directory permissions, so a suite run as root, as CI is, drops privileges
    for this one command with util-linux's ``setpriv``)."""
    cmd = [sys.executable, "-c", "from shearbatch.cli import bias_run; bias_run()", *args]
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        cmd = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
               "--clear-groups", *cmd]  # fmt: skip
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_bias_run_refuses_an_unwritable_output_dir(ws):
    """A directory the user may not write (0555): exit 2 naming --output-dir, nothing
    written. Run as an unprivileged user, in a world-readable workspace (pytest's own
    temporary directories are private to the user running the suite)."""
    base = Path(tempfile.mkdtemp(prefix="shearbatch-ro-"))
    try:
        base.chmod(0o755)
        cfg = shutil.copy(ws / "good.yaml", base / "good.yaml")
        Path(cfg).chmod(0o644)
        ro = base / "ro"
        ro.mkdir(mode=0o555)
        ro.chmod(0o555)  # (mkdir's mode is masked by the umask)
        res = _as_unprivileged(["--config", str(cfg), "--shear-grid", "0.01", "--no-progress",
                                "--output-dir", str(ro / "camp")], home=base)  # fmt: skip
        assert res.returncode == 2, (res.stdout, res.stderr)
        # one error line (the plan's INFO log lines come before it on stderr)
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1 and "--output-dir" in errors[0], res.stderr
        assert "Permission denied" in errors[0]
        assert "Traceback" not in res.stderr
        assert list(ro.iterdir()) == []  # nothing written
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- bias-extract


def test_bias_extract_refuses_bad_input(ws):
    (ws / "empty").mkdir(exist_ok=True)
    foreign = ws / "foreign"
    (foreign / "sub").mkdir(parents=True, exist_ok=True)
    (foreign / "notes.txt").write_text("hello\n")
    (foreign / "sub" / "data.csv").write_text("a,b\n1,2\n")
    bad_th = ws / "th.yaml"
    bad_th.write_text("convergence: {rhat_maxx: 1.1}\n")
    camp, out = str(ws / "camp"), str(ws / "x.csv")
    cases = [
        (["--input-dir", str(ws / "empty"), "--output", out], "--input-dir"),
        (["--input-dir", str(foreign), "--output", out], "--input-dir"),
        (["--input-dir", str(ws / "missing"), "--output", out], "--input-dir"),
        (["--input-dir", str(ws / "afile"), "--output", out], "--input-dir"),
        (["--input-dir", camp, "--output", str(ws)], "--output"),
        (["--input-dir", camp, "--output", str(ws / "afile" / "s.csv")], "--output"),
        (["--input-dir", camp, "--output", out, "--workers", "0"], "--workers"),
        (["--input-dir", camp, "--output", out, "--convergence-config", str(bad_th)],
         "convergence.rhat_maxx"),
        (["--input-dir", camp, "--output", out, "--convergence-config", str(ws / "no.yaml")],
         "--convergence-config"),
    ]  # fmt: skip
    for args, needle in cases:
        before = snapshot(ws)
        assert_refused(CliRunner().invoke(bias_extract, args), needle)
        assert snapshot(ws) == before, args


DAMAGE = {
    "truncated posterior.nc": ("posterior.nc", lambda p: p.write_bytes(p.read_bytes()[:800])),
    "foreign posterior.nc": (
        "posterior.nc",
        lambda p: xr.Dataset({"x": ("t", np.arange(3.0))}).to_netcdf(p, engine="netcdf4"),
    ),
    "invalid convergence.json": ("convergence.json", lambda p: p.write_text("{not json")),
    "convergence.json not a mapping": ("convergence.json", lambda p: p.write_text("[1, 2]")),
    "invalid truth.json": ("truth.json", lambda p: p.write_text('{"g1": ')),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_realization_is_a_status_not_a_crash(ws, tmp_path, damage):
    import shutil

    camp = tmp_path / "camp"
    shutil.copytree(ws / "camp", camp)
    victim = sorted(camp.glob("g1_*"))[0]
    name, spoil = DAMAGE[damage]
    spoil(victim / name)
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output",
                                            str(tmp_path / "s.csv")])  # fmt: skip
    assert res.exit_code == 0 and res.exception is None, res.output
    df = pd.read_csv(tmp_path / "s.csv")
    row = df.set_index("run_id").loc[victim.name]
    assert row["status"] == "corrupt" and name in row["reason"]
    assert (df["status"] == "ok").sum() == len(df) - 1
    assert "3 of 4 planned realization(s) complete; UNFINISHED" in res.output


# --------------------------------------------------------------------------- bias-stats


def _csv(ws, name: str, edit) -> str:
    df = pd.read_csv(ws / "summary.csv")
    path = ws / f"{name}.csv"
    edit(df).to_csv(path, index=False) if callable(edit) else path.write_text(edit)
    return str(path)


def _nan_truth(df):
    df.loc[0, "g1_true"] = math.nan
    return df


def test_bias_stats_refuses_bad_input(ws):
    cases = [
        (_csv(ws, "empty", ""), [], "--input"),
        (_csv(ws, "header", lambda df: df.iloc[:0]), [], "no usable rows"),
        (_csv(ws, "foreign", "a,b\n1,2\n"), [], "missing columns"),
        (_csv(ws, "binary", "\x00\x01garbage"), [], "--input"),
        (_csv(ws, "one_shear", lambda df: df[df.g1_true == 0.01]), [], "constant"),
        (_csv(ws, "all_failed", lambda df: df.assign(status="failed")), [], "no usable rows"),
        (_csv(ws, "nan_truth", _nan_truth), [], "g1_true"),
        (str(ws / "summary.csv"), ["--output-dir", str(ws / "afile")], "--output-dir"),
        (str(ws / "summary.csv"), ["--output-dir", str(ws / "afile" / "sub")], "--output-dir"),
        (str(ws / "missing.csv"), [], "--input"),
        (str(ws / "summary.csv"), ["--level", "level_9"], "--level"),
    ]
    for src, extra, needle in cases:
        before = snapshot(ws)
        args = ["--input", src, *extra]
        if "--output-dir" not in extra:
            args += ["--output-dir", str(ws / "stats")]
        assert_refused(CliRunner().invoke(bias_stats, [*args, "--no-plots"]), needle)
        assert snapshot(ws) == before, args


# --------------------------------------------------------------------------- properties


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


PATHS = list(_paths(BASE))
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.lists(st.floats(-2, 2), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(),
                                                            max_size=2),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from(PATHS), value=VALUES, action=st.sampled_from(["set", "del", "add"]))
def test_mutated_config_is_accepted_or_names_a_key(path, value, action):
    raw = copy.deepcopy(BASE)
    node = raw
    for k in path[:-1]:
        node = node[k]
    if action == "set":
        node[path[-1]] = value
    elif action == "del":
        del node[path[-1]]
    elif isinstance(node.get(path[-1]), dict):
        node[path[-1]]["zz_unknown"] = value
        path = (*path, "zz_unknown")
    else:
        node["zz_unknown"] = value
        path = (*path[:-1], "zz_unknown")
    try:
        parse_config(raw)
    except ConfigError as err:
        msg = str(err)
        assert "\n" not in msg and "Traceback" not in msg
        key = msg.split(": ")[0]
        dotted = ".".join(path)
        # the message names the mutated key, one of its parents, or a key inside it
        assert key and (dotted.startswith(key) or key.startswith(dotted)), (dotted, msg)


FLAG_VALUES = {
    "--n-realizations": st.integers(-3, 5) | st.just(10**12) | st.just("x"),
    "--batch-size": st.integers(-2, 8) | st.just("1.5"),
    "--base-seed": st.integers(-3, 2**40),
    "--seed": st.integers(-3, 5),
    "--shear-grid": st.floats(-1.5, 1.5) | st.just("nan") | st.just("inf"),
    "--g1-true": st.floats(-1.5, 1.5) | st.just("nan"),
    "--g2-true": st.floats(-1.5, 1.5),
    "--array-task-id": st.integers(-1, 4),
    "--array-task-count": st.integers(-1, 4),
    "--method": st.sampled_from(["map", "vi", "nuts", "MAP", "hmc", ""]),
}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(flags=st.dictionaries(st.sampled_from(list(FLAG_VALUES)), st.none(), min_size=1,
                             max_size=5), data=st.data())  # fmt: skip
def test_random_flags_plan_or_name_a_flag(ws, flags, data):
    args = ["--config", str(ws / "good.yaml"), "--dry-run", "--output-dir", str(ws / "hyp")]
    for f in flags:
        args += [f, str(data.draw(FLAG_VALUES[f], label=f))]
    res = CliRunner().invoke(bias_run, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.exception)
    assert res.exit_code in (0, 2), (args, res.output)
    if res.exit_code == 2:
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (args, res.output)
        named = [f for f in (*FLAG_VALUES, "campaign.", "shear", "no shear") if f in lines[0]]
        assert named, (args, lines[0])
    assert not (ws / "hyp").exists()  # a dry run writes nothing
