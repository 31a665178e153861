"""Each figure quoted in README.md, docs/validation.md and docs/benchmarks.md is its
record's value at the quoted rounding (issue 44 item 2); pure text and JSON, no JAX.

The convention (also stated in docs/benchmarks.md's introduction):

- a figure is quoted in a section (the text between two Markdown headings) that names its
  record: the record's file name (``host.json``) or, for a campaign, its folder
  (``level2_cpu_2d_wide/``);
- :data:`FIGURES` lists the quoted figures that have a machine-readable record, each as a
  :class:`Fig`: the document, the quoted text with each number a ``{}`` placeholder, the
  record (a path under ``results/``) and, per placeholder, how to read the value from the
  record and round it as quoted: a JSON path with a format (:func:`j`), a value computed
  from records (:func:`calc`), or a token of a printed record (:func:`txt`, a regular
  expression whose group is quoted as printed, its own rounding; its ``conv`` changes the
  notation only: thousands separators, a number word);
- the test renders the text with the records' values and looks for it in the document
  (whitespace runs, line breaks included, compare as one space), then for the record's
  name in the same section.

So changing a quoted number in a document, or the value under it in a record, fails the
test (the rendered text is no longer in the document); a figure with no record is not
quoted ("not recorded"). A new figure: add a :class:`Fig` beside its document's others.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = "results/benchmarks/"
VAL = "results/validation/"


@functools.cache
def load(path: str) -> Any:
    p = ROOT / path
    return json.loads(p.read_text()) if p.suffix == ".json" else p.read_text()


def get(doc: Any, key: str) -> Any:
    """``a.b[2].c`` and ``rows[variant=before]`` (the first list item whose field equals)."""
    for part in re.findall(r"[^.\[\]]+|\[[^\]]+\]", key):
        if part.startswith("["):
            inner = part[1:-1]
            if "=" in inner:
                k, v = inner.split("=", 1)
                doc = next(x for x in doc if str(x.get(k)) == v)
            else:
                doc = doc[int(inner)]
        else:
            doc = doc[part]
    return doc


Value = Callable[[str], str]  # the record's path -> the quoted string


def j(key: str, fmt: str | Callable[[Any], str], path: str | None = None) -> Value:
    """The JSON value at ``key`` (of ``path``, default the figure's record), formatted."""

    def read(record: str) -> str:
        v = get(load(path or record), key)
        return fmt(v) if callable(fmt) else format(v, fmt)

    return read


def calc(fn: Callable[[Callable[..., Any]], Any], fmt: str | Callable[[Any], str]) -> Value:
    """A value computed from records: ``fn(J)`` where ``J(path, key)`` reads one."""

    def read(record: str) -> str:
        v = fn(lambda path, key: get(load(path), key))
        return fmt(v) if callable(fmt) else format(v, fmt)

    return read


def txt(pattern: str, path: str | None = None, conv: Callable[[str], str] | None = None) -> Value:
    """The first group of ``pattern`` in a printed record, as printed (``conv``: only a
    change of notation, such as thousands separators, never a rounding)."""

    def read(record: str) -> str:
        m = re.search(pattern, load(path or record), re.M)
        assert m, f"{path or record}: no match for {pattern!r}"
        return conv(m.group(1)) if conv else m.group(1)

    return read


def int_commas(s: str) -> str:
    return f"{int(s):,}"


def e3(digits: int = 2, sign: bool = True) -> Callable[[float], str]:
    """``+2.09e-3``: the value in units of 1e-3."""
    return lambda v: f"{v * 1e3:{'+' if sign else ''}.{digits}f}e-3"


@dataclass(frozen=True)
class Fig:
    doc: str
    text: str
    record: str
    values: tuple[Value, ...]
    cite: str | None = None  # what the section names; default: the record's file name

    def rendered(self) -> str:
        return self.text.format(*(v(self.record) for v in self.values))

    def citation(self) -> str:
        if self.cite:
            return self.cite
        p = Path(self.record)
        return p.name if p.suffix in (".json", ".txt") else p.name + "/"


def stat(comp: str, path: str) -> tuple[Value, Value]:
    """``comp``'s value and error as ``bias-stats`` printed them (``printed.txt``)."""
    line = rf"^\s+{comp} = (\S+) ± (\S+)"
    return txt(line, path), txt(line.replace("(\\S+) ±", "\\S+ ±"), path)


def ivw(comp: str, err: bool) -> Callable[[Callable[..., Any]], float]:
    """The inverse-variance mean of the CPU (500 seeds) and H100 campaigns."""

    def fn(J):
        pairs = [(J(VAL + f"{c}/bias_results.json", comp),
                  J(VAL + f"{c}/bias_results.json", comp + "_err"))
                 for c in ("level2_cpu_2d", "level2_field_gpu")]  # fmt: skip
        w = [1 / e**2 for _, e in pairs]
        return (
            math.sqrt(1 / sum(w))
            if err
            else sum(wi * v for wi, (v, _) in zip(w, pairs, strict=True)) / sum(w)
        )

    return fn


HOST, HOST0 = BENCH + "host.json", BENCH + "host_before.json"
L0, L2 = "configs.level0.stages.", "configs.level2.stages."
CPU2D, WIDE, GPU2D = VAL + "level2_cpu_2d/", VAL + "level2_cpu_2d_wide/", VAL + "level2_field_gpu/"
E3 = VAL + "level2_2d_3e4/"
E3T = VAL + "level2_2d_3e4_tol/"
CHAOS = BENCH + "chaos_slurm.json"


def _chaos_targets(faults: list[dict]) -> list[dict]:
    """The runs each chaos_slurm fault was aimed at (a disk fill's: those computing)."""
    out = []
    for f in faults:
        tg = f["target"]
        runs = [tg] if "task" in tg else tg["running"]
        out += [r for r in runs if f["kind"] != "disk_full" or r["task"] in tg["computing"]]
    return out


NB = VAL + "noise_bias/"
NBMAP, NBVI, NBNUTS = (VAL + f"noise_bias/noise_bias_{m}.json" for m in ("map", "vi", "nuts"))
INTERIM = VAL + "survey_snr30_interim/validation.json"
L1V, L2V = VAL + "level1_map/validation.json", VAL + "level2/validation.json"
SCAN = VAL + "level2_snr_scan.json"
DRAWS, KHAT = BENCH + "draws.json", BENCH + "khat_level2.json"
EST = BENCH + "estimator.json"
GPUJ, FIELD = BENCH + "gpu.json", BENCH + "field.json"
RATE, CAMP = BENCH + "level2_rate.json", BENCH + "level2_campaign.json"
LOCK, LOCK4 = BENCH + "lockstep.json", BENCH + "lockstep_chunk4.json"
SCAL = BENCH + "scaling.json"
NL2, NL2B, NL2BA = (BENCH + f"nuts_level2{x}.json" for x in ("", "_band", "_band_at"))
BM, VM, RM = "docs/benchmarks.md", "docs/validation.md", "README.md"


def ratio(key: str) -> Value:
    return calc(lambda J: J(HOST, key) / J(HOST0, key), ".2f")


def rows_where(path: str, key: str, **match: Any) -> Callable[[Callable[..., Any]], Any]:
    """The field ``key`` of the first item of the list at ``path`` whose fields equal ``match``."""
    lst, _, field = key.rpartition(".")
    return lambda J: next(x for x in J(path, lst) if all(x.get(k) == v for k, v in match.items()))[
        field
    ]


def nuts_l2_s(J: Callable[..., Any]) -> float:
    """scaling.json's NUTS at M = 8 (2 chains x 200 transitions) scaled to M = 32, 700 transitions x 4 chains."""
    return 1 / J(SCAL, "nuts_vs_m[1].realizations_per_s") * (32 / 8) * (700 / 200) * (4 / 2)


def collapsed_pct(J: Callable[..., Any], folder: str) -> float:
    """The percentage of a campaign's pooled galaxies with collapsed population weights."""
    res = folder + "bias_results.json"
    return (
        100 * sum(p["n_collapsed"] for p in J(res, "population.grid_points")) / J(res, "fits.g1.n")
    )


def gpu_sigma_m(J: Callable[..., Any]) -> float:
    """The H100 campaign's sigma_m: the mean of m1's and m2's errors."""
    return (
        J(GPU2D + "validation.json", "result.m1_err")
        + J(GPU2D + "validation.json", "result.m2_err")
    ) / 2


def gpu_factor(J: Callable[..., Any], sigma_m: float) -> float:
    """How many times the H100 campaign's galaxies ``sigma_m`` needs (sigma_m as 1/sqrt(galaxies))."""
    return (gpu_sigma_m(J) / sigma_m) ** 2


def interim_per_1000(J: Callable[..., Any]) -> tuple[float, float]:
    """The interim campaign's paired and unpaired sigma_m scaled to 1,000 realizations."""
    n = J(INTERIM, "ring.n_realizations")
    unpaired = J(INTERIM, "unpaired_same_images.sigma_m_unpaired_same_n")
    return J(INTERIM, "ring.m1_err") * math.sqrt(n / 1000), unpaired * math.sqrt(n / 1000)


def lit(text: str) -> Value:
    """Literal text in a placeholder (markup that only some rows carry)."""
    return lambda record: text


def snr_q(rec: str, q: str) -> Value:
    """A percentile of a validation campaign's per-galaxy S/N (``p2.5``: a key with a dot)."""
    return calc(lambda J: J(rec, "snr_per_galaxy")[q], ".0f")


def draws_row(proposal: str, k: str, field: str) -> Callable[[Callable[..., Any]], Any]:
    """A field (``halves.dm``) of draws.json's row for ``proposal`` at ``k`` draws (``"1,000"``)."""

    def fn(J):
        row = next(r for r in J(DRAWS, "measured.rows")
                   if r["proposal"] == proposal and r["K"] == int(k.replace(",", "")))  # fmt: skip
        return get(row, field)

    return fn


def study_row(k: int, field: str) -> Callable[[Callable[..., Any]], Any]:
    """A field of level2_rate.json's draws study (32,768 real galaxies) at ``k`` draws."""

    def fn(J):
        rows = J(RATE, "measured.rows[variant=before].draws_study.rows")
        return get(next(r for r in rows if r["K"] == k), field)

    return fn


def pm_common(pair: tuple[float, float]) -> str:
    """``-2.2e-3 +- 0.4e-3``: a value and its error in the larger of their powers of ten."""
    v, e = pair
    ex = max(math.floor(math.log10(abs(v))), math.floor(math.log10(e)))
    return f"{v / 10**ex:+.1f}e{ex} +- {e / 10**ex:.1f}e{ex}"


def est_row(proposal: str, k: int, field: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    """estimator.json's row for ``proposal`` at ``k`` draws: ``field``, or (dm, dm_err)."""

    def fn(J):
        row = next(r for r in J(EST, "measured.rows") if r["proposal"] == proposal and r["K"] == k)
        return row[field] if field else (row["dm"], row["dm_err"])

    return fn


def load_range(
    path: str, start: str = "load_average_start", end: str = "load_average_end"
) -> tuple[Value, Value]:
    """The lowest and highest load average (1, 5 and 15 min) at the start and end of a run, ``.1f``."""
    return tuple(
        calc(lambda J, agg=agg: agg(J(path, start) + J(path, end)), ".1f") for agg in (min, max)
    )


def chunk_row(
    cfg: str, method: str, batch: int, chunk: int, field: str
) -> Callable[[Callable[..., Any]], Any]:
    return rows_where(
        BENCH + "chunking.json",
        "rows." + field,
        config=f"configs/{cfg}.yaml",
        method=method,
        batch_size=batch,
        chunk=chunk,
    )


def sci_pm(pair: tuple[float, float]) -> str:
    """``-2.5e-3 +- 1.5e-3``: a value and its error in units of the value's power of ten; ``0`` for 0."""
    v, e = pair
    if v == 0:
        return "0"
    ex = math.floor(math.log10(abs(v)))
    return f"{v / 10**ex:+.1f}e{ex} +- {e / 10**ex:.1f}e{ex}"


def galaxies_for(J: Callable[..., Any], sigma_m: float) -> float:
    """Galaxies for ``sigma_m``: (sigma_m x sqrt(galaxies) of the 3,000-seed CPU campaign / sigma_m)^2."""
    res = VAL + "level2_cpu_2d_wide/bias_results.json"
    return (J(res, "m1_err") * math.sqrt(J(res, "fits.g1.n")) / sigma_m) ** 2


RENDER, MAPJ, NUTS = BENCH + "render.json", BENCH + "map.json", BENCH + "nuts.json"
COLD, THR = BENCH + "cold_start.json", BENCH + "throughput.json"
CHUNK64 = "lax.map(vmap, batch_size=64)"

FIGURES: list[Fig] = [
    # docs/benchmarks.md: host work per realization (host.json, host_before.json)
    Fig(BM, "| Level 0: records + write | {} | {} | {} |", HOST,
        (j(L0 + "host_cpu_ms", ".2f", HOST0), j(L0 + "host_cpu_ms", ".2f"), ratio(L0 + "host_cpu_ms"))),
    Fig(BM, "| of which `posterior.nc` | {} | {} | {} |", HOST,
        (j(L0 + "posterior_nc_cpu_ms", ".2f", HOST0), j(L0 + "posterior_nc_cpu_ms", ".2f"),
         ratio(L0 + "posterior_nc_cpu_ms"))),
    Fig(BM, "| of which the JSON files | {} | {} | (load) |", HOST,
        (j(L0 + "json_cpu_ms", ".2f", HOST0), j(L0 + "json_cpu_ms", ".2f"))),
    Fig(BM, "| Level 2: records + write | {} | {} | {} |", HOST,
        (j(L2 + "host_cpu_ms", ".1f", HOST0), j(L2 + "host_cpu_ms", ".2f"), ratio(L2 + "host_cpu_ms"))),
    Fig(BM, "| of which `posterior.nc` (1.9 MB) | {} | {} | {} |", HOST,
        (j(L2 + "posterior_nc_cpu_ms", ".1f", HOST0), j(L2 + "posterior_nc_cpu_ms", ".2f"),
         ratio(L2 + "posterior_nc_cpu_ms"))),
    Fig(BM, "Level 0 is at {}x of the figure before issue 33", HOST, (ratio(L0 + "host_cpu_ms"),)),
    Fig(BM, "One writer thread writes {} Level 0 realizations/s ({} before issue 33,", HOST,
        (j("configs.level0.scaling[2].realizations_per_s", ",.0f"),
         j("configs.level0.scaling[2].realizations_per_s", ",.0f", HOST0))),
    Fig(BM, "Level 2: {} realizations/s with one writer process against {} with one writer "
        "thread", HOST, (j("configs.level2.scaling[kind=process].realizations_per_s", ".0f"),
                         j("configs.level2.scaling[2].realizations_per_s", ".0f"))),
    # the 1,024-realization Level 0 campaign (throughput_template.json)
    Fig(BM, "{} realizations/s after the first batch with the default background writer "
        "threads, {} with serial writes, {} serial and unchunked; inference {} ms and records "
        "+ three files {} ms CPU per realization at batch 64", BENCH + "throughput_template.json",
        (j("target[mode=threads].realizations_per_s", ".0f"),
         j("target[mode=serial].realizations_per_s", ".0f"),
         j("target[mode=unchunked].realizations_per_s", ".0f"),
         j("cpu_per_realization.inference_cpu_ms", ".1f"),
         j("cpu_per_realization.records_and_write_cpu_ms", ".1f"))),
    # bias-extract (extract.json)
    Fig(BM, "10,000 realization directories in {} s with 2 workers", BENCH + "extract.json",
        (j("total_s", ".1f"),)),
    # stages 2 and 3 start-up (import.json): after, and the commit before (interleaved)
    Fig(BM, "`bias-stats --help` starts in {} s (target {} s), `bias-extract --help` in {} s "
            "and `import shearbatch.cli.stats` in {} s", BENCH + "import.json",
        (calc(lambda J: load(BENCH + "import.json")["commands"]["bias-stats --help"]["median_s"],
              ".2f"),
         j("target_s", "g"),
         calc(lambda J: load(BENCH + "import.json")["commands"]["bias-extract --help"][
             "median_s"], ".2f"),
         calc(lambda J: load(BENCH + "import.json")["commands"]["import shearbatch.cli.stats"][
             "median_s"], ".2f"))),
    Fig(BM, "At `{}`, timed interleaved with these, the same took {} s, {} s and {} s",
        BENCH + "import.json",
        (j("before.commit", lambda c: c[:7]),
         *(calc(lambda J, k=k: load(BENCH + "import.json")["before"]["commands"][k]["median_s"],
                ".2f")
           for k in ("bias-stats --help", "bias-extract --help",
                     "import shearbatch.cli.stats")),)),
    Fig(BM, "(`import jax` alone took {} s)", BENCH + "import.json",
        (calc(lambda J: load(BENCH + "import.json")["before"]["commands"][
            "import jax (reference)"]["median_s"], ".2f"),)),
    # Level 2 through bias-run (level2_campaign.json)
    Fig(BM, "shipped {} and {} (median {}): {}x", BENCH + "level2_campaign.json",
        (j("measured.runs[1].galaxies_per_s", ".0f"), j("measured.runs[4].galaxies_per_s", ".0f"),
         calc(lambda J: (J(BENCH + "level2_campaign.json", "measured.runs[1].galaxies_per_s")
                         + J(BENCH + "level2_campaign.json", "measured.runs[4].galaxies_per_s"))
              / 2, ".0f"),
         calc(lambda J: (J(BENCH + "level2_campaign.json", "measured.runs[1].galaxies_per_s")
                         + J(BENCH + "level2_campaign.json", "measured.runs[4].galaxies_per_s"))
              / (J(BENCH + "level2_campaign.json", "measured.runs[0].galaxies_per_s")
                 + J(BENCH + "level2_campaign.json", "measured.runs[3].galaxies_per_s")),
              ".2f"))),
    Fig(BM, "quiet: load {}-{}; record `results/benchmarks/level2_campaign.json`", CAMP,
        load_range(CAMP, "info.load_average_start")),
    Fig(BM, "before issue 42 {} and {} (median {})", CAMP,
        (j("measured.runs[0].galaxies_per_s", ".0f"), j("measured.runs[3].galaxies_per_s", ".0f"),
         j("measured.median_galaxies_per_s.before", ".0f"))),
    Fig(BM, "(median {}): {}x. With `campaign.draws: estimator` (the float32 estimator draws only) {} and {}", CAMP,
        (j("measured.median_galaxies_per_s.shipped", ".0f"), j("measured.ratio", ".2f"),
         j("measured.runs[2].galaxies_per_s", ".0f"), j("measured.runs[5].galaxies_per_s", ".0f"))),
    Fig(BM, "(the program alone: {}, above)", RATE, (j("measured.rows[variant=shipped].galaxies_per_s", ".0f"),)),
    Fig(BM, "sigma_m = 3e-4 (~{} million Level 2 galaxies, from sigma_m x sqrt(galaxies) of `level2_cpu_2d_wide/`) "
        "is ~{} minutes", CAMP,
        (calc(lambda J: galaxies_for(J, 3e-4) / 1e6, ".1f"),
         calc(lambda J: galaxies_for(J, 3e-4) / J(CAMP, "measured.median_galaxies_per_s.shipped") / 60, ".0f"))),
    # Level 2's inference program (level2_rate.json)
    *[Fig(BM, f"| {name} | " + "{} | {} | {} | {} |", RATE,
          (j(f"measured.rows[variant={v}].median_batch_s", ".2f"),
           j(f"measured.rows[variant={v}].galaxies_per_s", ".0f"),
           j(f"measured.ratio_to_before.{v}", ".2f"),
           calc(lambda J, v=v: (J(RATE, f"measured.rows[variant={v}].dm1"),
                                J(RATE, f"measured.rows[variant={v}].dm1_err")), sci_pm)))
      for name, v in (("before (float64 stamps) | 1,000", "before"), ("200 draws | 200", "draws_200"),
                      ("draws' stamps in float32 | 1,000", "draw_f32"),
                      ("Gauss-Newton steps in float32 | 1,000", "gn_f32"),
                      ("exact Newton to half-decrement 1e-5 | 1,000", "newton_tol"),
                      ("shipped (all four) | 200", "shipped"))],
    Fig(BM, "its shift is Monte Carlo noise of the weights, consistent with zero ({} sigma)", RATE,
        (calc(lambda J: abs(J(RATE, "measured.rows[variant=newton_tol].dm1"))
              / J(RATE, "measured.rows[variant=newton_tol].dm1_err"), ".1f"),)),
    Fig(BM, "Gauss-Newton included, {} -> {} in the record)", RATE,
        (j("measured.rows[variant=before].newton_steps_median", ".0f"),
         j("measured.rows[variant=newton_tol].newton_steps_median", ".0f"))),
    Fig(BM, "alone, at 1,000 float64 draws, it gives {}x. The inference program reaches {} galaxies/s", RATE,
        (j("measured.ratio_to_before.newton_tol", ".2f"),
         j("measured.rows[variant=shipped].galaxies_per_s", ".0f"))),
    Fig(BM, "quiet: load {}-{}, float64; record `results/benchmarks/level2_rate.json`", RATE,
        tuple(calc(lambda J, agg=agg: agg(r["load_after"][0] for r in J(RATE, "measured.rows")), ".1f")
              for agg in (min, max))),
    Fig(BM, "6 batches of 16 realizations (3,072 galaxies, seeds 0-23), the median of {} post-compile calls",
        RATE, (j("settings.repeats", "d"),)),
    Fig(BM, "so their shift of m is the lever's own: {} and {},", RATE,
        tuple(j(f"measured.rows[variant={v}].dm1", lambda x: sci_pm((abs(x), 0)).split(" ")[0].lstrip("+"))
              for v in ("draw_f32", "gn_f32"))),
    Fig(BM, "Monte Carlo noise ({} sigma here;", RATE,
        (calc(lambda J: abs(J(RATE, "measured.rows[variant=shipped].dm1"))
              / J(RATE, "measured.rows[variant=shipped].dm1_err"), ".1f"),)),
    # cost per galaxy (cost.json)
    Fig(BM, "| gauss_newton, galaxies/s | {} | {} | {} | {} |", BENCH + "cost.json",
        tuple(j(f"vs_m[{i}].galaxies_per_s", ".0f") for i in (0, 2, 4, 5)),
        cite="results/benchmarks/cost.{json,png}"),
    Fig(BM, "(here: bit for bit at Level 2 between the two programs, {} posterior sd; step counts and flags equal)",
        LOCK, (calc(lambda J: max(r["agreement"]["max_diff_sd"] for r in J(LOCK, "rows") if "agreement" in r), ".1f"),),
        cite="results/benchmarks/lockstep.{json,png}"),
    # cost per galaxy, the other rows (cost.json)
    Fig(BM, "quiet: load {}-{};", BENCH + "cost.json",
        (j("load_average_start[0]", ".1f"), j("load_average_end[0]", ".1f")), cite="results/benchmarks/cost.{json,png}"),
    Fig(BM, "| newton, galaxies/s | | {} | {} | |", BENCH + "cost.json",
        (j("vs_m[1].galaxies_per_s", ".0f"), j("vs_m[3].galaxies_per_s", ".0f")), cite="results/benchmarks/cost.{json,png}"),
    Fig(BM, "| MiB per galaxy-lane | {} | {} | {} | {} |", BENCH + "cost.json",
        tuple(j(f"vs_m[{i}].mib_per_galaxy_lane", ".2f") for i in (0, 2, 4, 5)),
        cite="results/benchmarks/cost.{json,png}"),
    Fig(BM, "| lockstep efficiency (gauss_newton) | {} | {} | {} | {} |", BENCH + "cost.json",
        tuple(j(f"vs_m[{i}].lockstep_efficiency", ".2f") for i in (0, 2, 4, 5)),
        cite="results/benchmarks/cost.{json,png}"),
    Fig(BM, "(M = 128 / M = 8: {}) and memory per galaxy-lane is flat. Level 2 as shipped runs at {} galaxies/s",
        BENCH + "cost.json", (j("ratio_largest_m_to_m8", ".2f"), j("vs_m[4].galaxies_per_s", ".0f")),
        cite="results/benchmarks/cost.{json,png}"),
    Fig(BM, "not met on this machine by the benchmark's estimate ({}-{} minutes)", NL2B,
        (calc(lambda J: (300 * J(NL2B, "rows[1].s_per_realization") + J(NL2B, "rows[1].compile_s")) / 60, ".0f"),
         calc(lambda J: (300 * J(NL2BA, "rows[1].s_per_realization") + J(NL2B, "rows[1].compile_s")) / 60, ".0f")),
        cite="results/benchmarks/nuts_level2.json"),
    # docs/validation.md: the CPU campaigns (bias-stats' printed lines, as printed)
    *[Fig(VM, f"| {c} | " + "{} | {} |", CPU2D + "printed.txt", stat(c, CPU2D + "printed.txt"),
          cite="level2_cpu_2d/") for c in ("m1", "m2", "c1", "c2")],
    Fig(VM, "Coverage passes (g1 {} / {}, g2 {} / {} at 68% / 95%); {} galaxies ({}%)",
        CPU2D + "printed.txt",
        (*(txt(rf"coverage {g} {p}%\s+(\S+)") for g in ("g1", "g2") for p in (68, 95)),
         txt(r"(\d+) galaxies with collapsed weights"), calc(lambda J: collapsed_pct(J, CPU2D), ".2f")),
        cite="level2_cpu_2d/"),
    *[Fig(VM, f"| {c} | " + "{} | {} |", WIDE + "printed.txt", stat(c, WIDE + "printed.txt"),
          cite="level2_cpu_2d_wide/") for c in ("m1", "m2", "c1", "c2")],
    Fig(VM, "| | value | 1 sigma (jackknife over {} seeds) |", WIDE + "bias_results.json",
        (j("fits.g1.n_groups", "d"),), cite="level2_cpu_2d_wide/"),
    Fig(VM, "Coverage passes (g1 {} / {}, g2 {} / {} at 68% / 95%); {} galaxies ({}%)",
        WIDE + "printed.txt",
        (*(txt(rf"coverage {g} {p}%\s+(\S+)") for g in ("g1", "g2") for p in (68, 95)),
         j("population.grid_points", lambda p: f"{sum(x['n_collapsed'] for x in p):,}",
           WIDE + "bias_results.json"), calc(lambda J: collapsed_pct(J, WIDE), ".2f")),
        cite="level2_cpu_2d_wide/"),
    Fig(VM, "INCONCLUSIVE. sigma_m = {} (sigma_m x sqrt(galaxies) = {}).", WIDE + "bias_results.json",
        (j("m1_err", lambda v: f"{v * 1e4:.1f}e-4"), calc(lambda J: J(WIDE + "bias_results.json", "m1_err")
                                  * math.sqrt(J(WIDE + "bias_results.json", "fits.g1.n")), ".2f")),
        cite="level2_cpu_2d_wide/"),
    Fig(VM, "it was m1 = {} ± {}, m2 = {} ± {}, c1 = {} ± {}, c2 = {} ± {}: the c1 of",
        WIDE + "printed_2500.txt",
        tuple(v for c in ("m1", "m2", "c1", "c2") for v in stat(c, WIDE + "printed_2500.txt"))),
    Fig(VM, "`bias-stats` took {} ({} s) with a peak RSS of {} kB ({} GiB;", WIDE + "printed.txt",
        (txt(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)"),
         calc(lambda J: sum(float(x) * 60**i for i, x in enumerate(reversed(re.search(
             r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", J(WIDE + "printed.txt", "")).group(1)
             .split(":")))), ".0f"),
         txt(r"Maximum resident set size \(kbytes\): (\d+)"),
         calc(lambda J: int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                                      J(WIDE + "printed.txt", "")).group(1)) / 2**20, ".1f"))),
    *[Fig(VM, "is m1 = {} +- {}, m2 = {} +- {}, c1 = {} +- {}, c2 = {} +- {} from 227,200",
          CPU2D + "bias_results.json",
          tuple(calc(ivw(c, e), e3(2, not e)) for c in ("m1", "m2", "c1", "c2")
                for e in (False, True)), cite="level2_field_gpu/")],
    # docs/validation.md: noise bias and planning (noise_bias/; survey_snr30_interim/validation.json)
    Fig(VM, "| MAP (joint mode), {} / {} / {} seed pairs | m1 = {} +- {} | m1 = {} +- {} | m1 = {} +- {} |", NBMAP,
        (*(j(f"rows[snr={snr}].n_realizations", lambda v: f"{v // 2:,}") for snr in (15, 30, 100)),
         *(v for snr in (15, 30, 100) for v in (j(f"rows[snr={snr}].m1", "+.4f"), j(f"rows[snr={snr}].m1_err", ".4f")))),
        cite="noise_bias/"),
    Fig(VM, "| VI (posterior mean), {} / {} / {} pairs | m1 = {} +- {} | m1 = {} +- {} | m1 = {} +- {} |", NBVI,
        (*(j(f"rows[snr={snr}].n_realizations", lambda v: f"{v // 2:,}") for snr in (15, 30, 100)),
         j("rows[snr=15].m1", "+.3f"), j("rows[snr=15].m1_err", ".3f"),
         *(v for snr in (30, 100) for v in (j(f"rows[snr={snr}].m1", "+.4f"), j(f"rows[snr={snr}].m1_err", ".4f")))),
        cite="noise_bias/"),
    Fig(VM, "| NUTS (posterior mean), {} pairs | | m1 = {} +- {} | |", NBNUTS,
        (j("rows[0].pairs", "d"), j("rows[0].m1_pairs", "+.3f"), j("rows[0].m1_pairs_err", ".3f")), cite="noise_bias/"),
    Fig(VM, "(`inference.shear_model: interim`), {} pairs | | m1 = {} +- {} | |", INTERIM,
        (j("ring.n_seeds", "d"), j("ring.m1", "+.4f"), j("ring.m1_err", ".4f")), cite="survey_snr30_interim/"),
    Fig(VM, "m1 = {} +- {} ({} sigma, {} realizations), about {} (S/N)^-2", NBMAP,
        (j("rows[snr=15].m1", "+.4f"), j("rows[snr=15].m1_err", ".4f"),
         calc(lambda J: abs(J(NBMAP, "rows[snr=15].m1")) / J(NBMAP, "rows[snr=15].m1_err"), ".1f"),
         j("rows[snr=15].n_used", ",d"), calc(lambda J: abs(J(NBMAP, "rows[snr=15].m1")) * 15**2, ".1f")),
        cite="noise_bias/"),
    Fig(VM, "consistent with zero at sigma_m = {} / {}", NBMAP,
        tuple(j(f"rows[snr={snr}].m1_err", lambda v: f"{v * 1e3:.1f}e-3") for snr in (30, 100)), cite="noise_bias/"),
    Fig(VM, "{} of the {} NUTS realizations carry the `DIVERGENCES` flag", NB + "nuts_snr30/bias_results.json",
        (j("excluded.flag DIVERGENCES", "d"), j("n_realizations", "d")), cite="noise_bias/"),
    Fig(VM, "the paired estimate over all {} ok pairs", NBNUTS, (j("rows[0].pairs", "d"),), cite="noise_bias/"),
    Fig(VM, "68% intervals hold the truth {}-{} of the time and 95% ones {}-{}", NBMAP,
        tuple(calc(lambda J, p=p, agg=agg: agg(J(NB + f"map_snr{snr}/bias_results.json", "coverage")[g][p]["observed"]
                                               for snr in (15, 30, 100) for g in ("g1", "g2")), ".2f")
              for p in ("0.68", "0.95") for agg in (min, max)), cite="noise_bias/"),
    Fig(VM, "(coverage FAILs at S/N 15: {} and {} over {} seeds)", NB + "map_snr15/bias_results.json",
        (calc(lambda J: J(NB + "map_snr15/bias_results.json", "coverage")["g1"]["0.68"]["observed"], ".3f"),
         calc(lambda J: J(NB + "map_snr15/bias_results.json", "coverage")["g1"]["0.95"]["observed"], ".3f"),
         j("fits.g1.n_groups", ",d")), cite="noise_bias/"),
    Fig(VM, "(`map_snr30_f32`, {} pairs) gives m1 = {} +- {}", NB + "map_snr30_f32/bias_results.json",
        (j("n_used", lambda v: f"{v // 2:,}"), j("m1", lambda v: f"{v * 1e4:+.2f}e-4"),
         j("m1_err", lambda v: f"{v * 1e3:.2f}e-3")), cite="noise_bias/"),
    *[Fig(VM, f"| {name} | " + "{} | {} | {} | {} |", rec,
          (j(f"rows[snr={snr}].sigma_m_per_1000_paired", f1), j(f"rows[snr={snr}].sigma_m_per_1000_unpaired", ".2f"),
           j(f"rows[snr={snr}].n_for_1e-3_paired", lambda v, r=r: f"{round(v, r):,}"),
           j(f"rows[snr={snr}].n_for_1e-3_unpaired", lambda v: f"{v:.1e}".replace("e+0", "e"))), cite="noise_bias/")
      for name, rec, snr, f1, r in (("survey_snr100.yaml (g = +-0.02)", NBMAP, 100, ".4f", -2),
                                    ("survey_snr30.yaml", NBMAP, 30, ".4f", -2),
                                    ("survey_snr15.yaml", NBMAP, 15, ".3f", -3))],
    Fig(VM, "| survey_snr30.yaml, interim model (pooled) | {} | {} | {} | {} |", INTERIM,
        (calc(lambda J: interim_per_1000(J)[0], ".4f"), calc(lambda J: interim_per_1000(J)[1], ".2f"),
         calc(lambda J: round(1000 * (interim_per_1000(J)[0] / 1e-3) ** 2, -2), ",.0f"),
         calc(lambda J: 1000 * (interim_per_1000(J)[1] / 1e-3) ** 2, lambda v: f"{v:.1e}".replace("e+0", "e"))),
        cite="survey_snr30_interim/"),
    Fig(VM, "under-cover ({} / {} at 68 / 95%)", INTERIM,
        tuple(calc(lambda J, p=p: J(INTERIM, "ring.coverage")["g1"][p]["observed"], ".2f") for p in ("0.68", "0.95")),
        cite="survey_snr30_interim/"),
    # shear prior (uniform_prior/)
    *[Fig(VM, f"| {name} | " + "{} +- {} | {} +- {} |", VAL + f"uniform_prior/stats_{tag}_mode/bias_results.json",
          (j("m1", "+.4f"), j("m1_err", ".4f"), j("m1", "+.4f", VAL + f"uniform_prior/stats_{tag}/bias_results.json"),
           j("m1_err", ".4f", VAL + f"uniform_prior/stats_{tag}/bias_results.json")), cite="uniform_prior/")
      for name, tag in (("flat (`UniformDisk`, the default)", "flat"), ("U(-0.9, 0.9) per component", "uniform09"))],
    Fig(VM, "The Level 0 galaxy at matched-filter S/N 30, {} seeds x +-0.05, MAP",
        VAL + "uniform_prior/stats_flat/bias_results.json", (j("fits.g1.n_groups", ",d"),), cite="uniform_prior/"),
    # model bias and PSF anisotropy (misspecified_sersic/, psf_anisotropy/)
    *[Fig(VM, f"| {camp} | {data} | {model} | " + "{}{} +- {}{} | {}{} +- {}{} |",
          VAL + f"{camp}/bias_results.json",
          (lit(bm), j("m1", "+.4f"), j("m1_err", ".4f"), lit(bm), lit(bc), j("c1", "+.4f"), j("c1_err", ".4f"), lit(bc)),
          cite=camp.split("/")[0] + "/")
      for camp, data, model, bm, bc in (
          ("misspecified_sersic/control", "GalSim, exponential", "exponential", "", ""),
          ("misspecified_sersic/sersic2", "GalSim, **Sersic n = 2**", "exponential", "**", ""),
          ("psf_anisotropy/known_psf", "JAX, PSF e1 = 0.05", "PSF e1 = 0.05", "", ""),
          ("psf_anisotropy/round_model", "JAX, PSF e1 = 0.05", "**round PSF**", "", "**"))],
    Fig(VM, "paired +-0.02 in g1, {} seeds = {} realizations per campaign",
        VAL + "misspecified_sersic/control/bias_results.json", (j("fits.g1.n_groups", "d"), j("n_used", "d")),
        cite="misspecified_sersic/"),
    Fig(VM, "Model bias ({} sigma): m1 = {} when the data are Sersic n = 2 galaxies and the model assumes "
        "exponentials; a noiseless least-squares fit of the prior-mean galaxy gives m1 = {}",
        VAL + "misspecified_sersic/sersic2/bias_results.json",
        (calc(lambda J: abs(J(VAL + "misspecified_sersic/sersic2/bias_results.json", "m1"))
              / J(VAL + "misspecified_sersic/sersic2/bias_results.json", "m1_err"), ".0f"),
         j("m1", "+.3f"), txt(r"n=2\.0: noiseless best-fit exponential: m1 = (\S+),",
                              VAL + "misspecified_sersic/noiseless_check.py")), cite="misspecified_sersic/"),
    Fig(VM, "PSF anisotropy ignored ({} sigma): c1 = {} for a PSF ellipticity", VAL + "psf_anisotropy/round_model/"
        "bias_results.json", (calc(lambda J: J(VAL + "psf_anisotropy/round_model/bias_results.json", "c1")
                                   / J(VAL + "psf_anisotropy/round_model/bias_results.json", "c1_err"), ".0f"),
                              j("c1", "+.3f")), cite="psf_anisotropy/"),
    # Levels 1 and 2 (level1_map/, level2/ and the campaigns beside them: each validation.json)
    Fig(VM, "| per-galaxy S/N (2.5 / 50 / 97.5%) | {} / {} / {} | {} / {} / {} |", L1V,
        tuple(snr_q(v, q) for v in (L1V, L2V) for q in ("p2.5", "p50", "p97.5")),
        cite="level1_map/"),
    Fig(VM, "| used | {} of {} | {} of {} |", L1V,
        tuple(j(f"ring.{k}", "d", v) for v in (L1V, L2V) for k in ("n_used", "n_realizations")), cite="level1_map/"),
    Fig(VM, "| m1 | {} +- {} | **{} +- {}** |", L1V,
        (j("ring.m1", lambda v: f"{v * 1e4:+.1f}e-4"), j("ring.m1_err", lambda v: f"{v * 1e3:.1f}e-3"),
         j("ring.m1", "+.4f", L2V), j("ring.m1_err", ".4f", L2V)), cite="level1_map/"),
    Fig(VM, "| c1, c2 | {} +- {}, {} +- {} | {} +- {}, {} +- {} |", L1V,
        (*(j(f"ring.{k}", (lambda v: f"{v * 1e4:+.1f}e-4") if k[-1] != "r" else (lambda v: f"{v * 1e4:.1f}e-4"))
           for k in ("c1", "c1_err", "c2", "c2_err")),
         *(j(f"ring.{k}", (lambda v: f"{v * 1e3:+.1f}e-3") if k[-1] != "r" else (lambda v: f"{v * 1e3:.1f}e-3"), L2V)
           for k in ("c1", "c1_err", "c2", "c2_err"))), cite="level1_map/"),
    Fig(VM, "| coverage g1, g2 (68 / 95%) | {} / {}, {} / {}: pass | {} / {}, {} / {}: pass |", L1V,
        tuple(calc(lambda J, v=v, g=g, p=p: J(v, "ring.coverage")[g][p]["observed"], ".2f")
              for v in (L1V, L2V) for g in ("g1", "g2") for p in ("0.68", "0.95")), cite="level1_map/"),
    Fig(VM, "| SBC (draws from N(0, 0.05)) | {}: rank p {} / {}, KS {} / {} | {}: rank p {} / {}, KS {} / {} |", L1V,
        tuple(v for rec in (L1V, L2V) for v in (
            j("sbc_campaign.n_used", "d", rec),
            *(j(f"sbc_campaign.sbc.{g}.{k}", ".2g", rec) for k in ("p_value", "ks_p_value") for g in ("g1", "g2")))),
        cite="level1_map/"),
    Fig(VM, "| ring sigma_m vs an unpaired regression on the same images | {}x smaller | {}x smaller |", L1V,
        (j("unpaired_same_images.ratio_to_ring", ".0f"), j("unpaired_same_images.ratio_to_ring", ".0f", L2V)),
        cite="level1_map/"),
    Fig(VM, "Level 1 meets its targets with MAP (sigma_m = {} <= 2e-3)", L1V,
        (j("ring.m1_err", lambda v: f"{v * 1e3:.1f}e-3"),), cite="level1_map/"),
    *[Fig(VM, f"| {name} | " + "{} of {} galaxies | {} +- {} | " + ("{} +- {}" if two else "") + " | {} +- {} | {} +- {} |",
          VAL + f"{camp}/validation.json",
          (j("ring.n_realizations", "d"), lit(gal), j("ring.m1", "+.4f"), j("ring.m1_err", ".4f"),
           *((j("ring.m2", "+.4f"), j("ring.m2_err", ".4f")) if two else ()),
           j("ring.c1", "+.4f"), j("ring.c1_err", ".4f"), j("ring.c2", "+.4f"), j("ring.c2_err", ".4f")),
          cite="(`bench/validate_levels.py ...`)")
      for name, camp, gal, two in (
          ("`2a61e54`", "level1_interim_2d", "8", True), ("`ae6ac85`", "level2_interim", "32", False))],
    Fig(VM, "| 480 of 32 galaxies | {} +- {} | {} +- {} | {} +- {} | {} +- {} |", VAL + "level2_interim_2d/validation.json",
        tuple(j(f"ring.{k}", "+.4f" if "err" not in k else ".4f")
              for c in ("m1", "m2", "c1", "c2") for k in (c, c + "_err")), cite="(`bench/validate_levels.py ...`)"),
    Fig(VM, "All consistent with zero within 2 sigma: Level 1 at sigma_m = {} (target 2e-3), Level 2 at {}-{} "
        "(target 5e-3), where the joint MAP gives {} on the same Level 2 population.",
        VAL + "level1_interim_2d/validation.json",
        (j("ring.m1_err", lambda v: f"{v * 1e4:.1f}e-4"),
         calc(lambda J: min(J(VAL + f"{c}/validation.json", "ring.m1_err") for c in ("level2_interim", "level2_interim_2d")),
              lambda v: f"{v * 1e3:.1f}"),
         calc(lambda J: max(J(VAL + f"{c}/validation.json", "ring.m1_err") for c in ("level2_interim", "level2_interim_2d")),
              lambda v: f"{v * 1e3:.1f}e-3"),
         j("ring.m1", "+.3f", L2V)), cite="(`bench/validate_levels.py ...`)"),
    Fig(VM, "480 images): m1 = {} +- {}, m2 = {} +- {}, c1 = {} +- {}, c2 = {} +- {}.",
        VAL + "level2_interim_2d/validation.json",
        tuple(j(f"ring.{k}", "+.4f" if "err" not in k else ".4f")
              for c in ("m1", "m2", "c1", "c2") for k in (c, c + "_err")), cite="--tag interim_2d"),
    *[Fig(VM, f"| {name} | " + "{} / {} / {} | {} +- {} | {} +- {} |", SCAN,
          (*(snr_q(VAL + f"{camp}/validation.json", q) for q in ("p2.5", "p50", "p97.5")),
           j(f"per_snr.{snr}.m1_all", "+.4f"), j(f"per_snr.{snr}.m1_all_se", ".4f"),
           j("ring.c1", c1f, VAL + f"{camp}/validation.json"), j("ring.c1_err", ".4f", VAL + f"{camp}/validation.json")),
          cite="level2_snr_scan.json")
      for name, camp, snr, c1f in (
          ("`8e711f9`", "level2_snr450", "450", "+.4f"), ("`8e711f9`", "level2", "45", "+.4f"),
          ("`8e711f9`", "level2_snr30", "30", "+.3f"))],
    Fig(VM, "| `4f28827` | {} / {} / {} | {} +- {} | {} +- {} |", VAL + "level2_m1/validation.json",
        (*(snr_q(VAL + "level2_m1/validation.json", q) for q in ("p2.5", "p50", "p97.5")),
         *(j(f"ring.{k}", "+.4f" if "err" not in k else ".4f") for k in ("m1", "m1_err", "c1", "c1_err"))),
        cite="level2_snr_scan.json"),
    Fig(VM, "With 10x less noise the same seeds give m1 = {} +- {}", SCAN,
        (j("per_snr.450.m1_all", "+.4f"), j("per_snr.450.m1_all_se", ".4f"))),
    Fig(VM, "({} at S/N 45 from the survey configs' scaling)", SCAN,
        (j("per_snr.45.m1_predicted_single_galaxy_scaling", "+.3f"),)),
    Fig(VM, "(difference {} +- {}; per-seed m at the two noise levels {} correlated)", SCAN,
        (j("pairs.30-45.diff", "+.4f"), j("pairs.30-45.se", ".4f"), j("pairs.30-45.corr", ".2f"))),
    # fewer draws that stay unbiased (draws.json, level2_rate.json's draws study, khat_level2.json)
    *[Fig(VM, f"| {name} | {k} | " + "{} | {} +- {} | {} +- {} | {} +- {} | {} |", DRAWS,
          (calc(draws_row(prop, k, "reps"), "d"),
           *(calc(draws_row(prop, k, f"{c}.{f}"), lambda v, f=f: f"{v * 1e5:+.1f}" if f == "dm" else f"{v * 1e5:.1f}")
             for c in ("halves", "delta", "none") for f in ("dm", "dm_err")),
           calc(draws_row(prop, k, "khat_high_fraction"),
                lambda v: "0" if not v else f"{100 * v:.2f}%" if 100 * v >= 0.01 else f"{100 * v:.3f}%")),
          cite="results/benchmarks/draws.json")
      for prop, name0 in (("student_t", "Student-t, the posterior's scale"),
                          ("student_t_narrow", "Student-t, 0.75x too narrow"))
      for k, name in zip(("50", "100", "200", "300", "1,000"), (name0, "", "", "", ""), strict=True)],
    Fig(VM, "{} galaxies per sign (the ring pairs whose posteriors lie 4 sd inside |eps| < 1, {}% of those drawn), "
        "whose marginal likelihoods are computed exactly by 32 x 32 Gauss-Hermite quadrature ({} in m from 64 x 64)",
        DRAWS, (j("measured.n_galaxies_per_sign", ",d"), j("measured.kept_fraction", lambda v: f"{100 * v:.0f}"),
                j("measured.reference.num_err", ".1e")), cite="results/benchmarks/draws.json"),
    Fig(VM, "Uncorrected, a proposal narrower than its posterior biases m by {} at 100 draws and still {} at 1,000", DRAWS,
        (calc(draws_row("student_t_narrow", "100", "none.dm"), lambda v: f"{v * 1e4:.1f}e-4"),
         calc(draws_row("student_t_narrow", "1,000", "none.dm"), lambda v: f"{v * 1e5:.1f}e-5")),
        cite="results/benchmarks/draws.json"),
    Fig(VM, "over-corrects at 50 and 100 draws ({}, {}: its O(1/K^2) term)", DRAWS,
        (calc(draws_row("student_t_narrow", "50", "halves.dm"), lambda v: f"{v * 1e4:+.1f}e-4"),
         calc(draws_row("student_t_narrow", "100", "halves.dm"), lambda v: f"{v * 1e5:+.1f}e-5")),
        cite="results/benchmarks/draws.json"),
    Fig(VM, "The toy's proposals flag at most {}% from 200 draws on (`draws.json`)", DRAWS,
        (calc(lambda J: 100 * max(r["khat_high_fraction"] for r in J(DRAWS, "measured.rows") if r["K"] >= 200), ".3f"),),
        cite="results/benchmarks/khat_level2.json"),
    *[Fig(VM, f"| {k} ({sets}) | " + "{} +- {} | {} +- {} | {} +- {} | {} |", RATE,
          (*(calc(study_row(k, f"{c}.{f}"), lambda v, f=f: f"{v * 1e4:+.1f}" if f == "dm" else f"{v * 1e4:.1f}")
             for c in ("halves", "delta", "none") for f in ("dm", "dm_err")),
           calc(study_row(k, "halves.mc_sd"), lambda v: f"{v * 1e4:.1f}")),
          cite="results/benchmarks/level2_rate.json")
      for k, sets in ((50, 20), (100, 10), (200, 5), (250, 4))],
    Fig(VM, "uncorrected, m moves by {} at 100 draws against 1,000", RATE,
        (calc(study_row(100, "none.dm"), lambda v: f"{v * 1e3:.1f}e-3"),), cite="results/benchmarks/level2_rate.json"),
    Fig(VM, "removes ~{}% and leaves an O(1/K) remainder", RATE,
        (calc(lambda J: 100 * (1 - study_row(100, "delta.dm")(J) / study_row(100, "none.dm")(J)), ".0f"),),
        cite="results/benchmarks/level2_rate.json"),
    Fig(VM, "{} at 200 draws; extrapolated over halves", RATE,
        (calc(study_row(200, "delta.dm"), lambda v: f"{v * 1e4:.1f}e-4"),), cite="results/benchmarks/level2_rate.json"),
    Fig(VM, "The draws' Monte Carlo scatter of m between sets ({} for these {} galaxies at 200 draws)", RATE,
        (calc(study_row(200, "halves.mc_sd"), lambda v: f"{v * 1e4:.1f}e-4"),
         j("measured.rows[variant=before].draws_study.n_galaxies", ",d")), cite="results/benchmarks/level2_rate.json"),
    Fig(VM, "are {}% of the galaxies at 50 draws, {}% at 100, **{}% at 200**, {}% at 500 and {}% at 1,000; above 0.7 "
        "(an infinite-variance tail at any K) {}% at 200 and {}% at 1,000", KHAT,
        (*(j(f"measured.rows[K={k}].fraction", lambda v, f=f: format(100 * v, f))
           for k, f in ((50, ".1f"), (100, ".1f"), (200, ".1f"), (500, ".1f"), (1000, ".2f"))),
         j("measured.rows[K=200]", lambda r: f"{100 * r['above_0.7']:.1f}"),
         j("measured.rows[K=1000]", lambda r: f"{100 * r['above_0.7']:.2f}")), cite="results/benchmarks/khat_level2.json"),
    # issue 56 item 5: the figures quoted without a check before
    Fig(VM, "repeated with fresh draws until each shift is known\nto {}; the three corrections on the same draws", DRAWS,
        (j("settings.target_err", lambda v: f"{v * 1e5:.1f}e-5"),), cite="results/benchmarks/draws.json"),
    Fig(VM, "These shifts are known to\n{} to {} (1 sigma), not 3e-5", RATE,
        tuple(calc(lambda J, agg=agg: agg(r[c]["dm_err"] for r in J(RATE, "measured.rows[variant=before].draws_study.rows")
                                          for c in ("halves", "delta", "none")), lambda v: f"{v * 1e4:.1f}e-4")
              for agg in (min, max)), cite="results/benchmarks/level2_rate.json"),
    # the estimator against its approximations (estimator.json)
    *[Fig(VM, f"| {name} | " + "{}{}{} | {}{}{} | {}{}{} | {} |", EST,
          (*(v for k in (100, 300, 1000) for v in (
              lit(b if k == 1000 else ""), calc(est_row(prop, k), pm_common), lit(b if k == 1000 else ""))),
           calc(lambda J, prop=prop: est_row(prop, 1000, "frac_collapsed")(J),
                lambda v: f"{100 * v:.2f}%" if v else "0")), cite="results/benchmarks/estimator.json")
      for name, prop, b in (("the exact posterior", "exact", ""), ("Gaussian 0.75x too narrow", "laplace_narrow", ""),
                            ("Student-t, nu = 5, the posterior's scale", "student_t", "**"),
                            ("Student-t, nu = 5, 0.75x narrow scale", "student_t_narrow", ""))],
    Fig(VM, "even where its scale is {}% too narrow", EST,
        (j("measured.toy.narrow_scale", lambda v: f"{100 * (1 - v):.0f}"),), cite="results/benchmarks/estimator.json"),
    Fig(VM, "The reference itself gives m = {} +- {} (known answer 0)", EST,
        (j("measured.reference.m", lambda v: f"{v * 1e4:+.1f}e-4"), j("measured.reference.m_err", lambda v: f"{v * 1e4:.1f}e-4")),
        cite="results/benchmarks/estimator.json"),
    Fig(VM, "a Gaussian proposal too narrow for its posterior biases m by {} at 300 draws and collapses ~{}% of the "
        "galaxies' weights", EST,
        (calc(lambda J: est_row("laplace_narrow", 300, "dm")(J), lambda v: f"{v * 1e3:.0f}e-3"),
         calc(lambda J: est_row("laplace_narrow", 300, "frac_collapsed")(J), lambda v: f"{100 * v:.0f}")),
        cite="results/benchmarks/estimator.json"),
    # Level 2's weights (weights.json, weights_level2.json)
    *[Fig(VM, f"| {name} | {seeds} | " + "{}{} of {}: {}%{} | {}: {}% | {} of {} |", rec,
          (lit(b), j("measured.galaxies.population_pooled.n_below", "d"), j("measured.n_galaxies", ",d"),
           j("measured.galaxies.population_pooled.frac_below", lambda v: f"{100 * v:.2f}"), lit(b),
           j("measured.galaxies.laplace.n_below", "d"),
           j("measured.galaxies.laplace.frac_below", lambda v: f"{100 * v:.2f}"),
           j("measured.realizations_flagged_collapsed.n", "d"), j("measured.n_realizations", ",d")),
          cite="results/benchmarks/weights.json")
      for name, seeds, rec, b in (
          ("before: Laplace at the MAP, interim prior 0.5 (`eeaec1b98a217347`)", "0-249 (`/tmp/l2_1000`)",
           BENCH + "weights.json", ""),
          ("**`configs/level2.yaml` now**: Student-t at the target mode, interim 0.3 (`b968767afdd659dd`)", "0-63",
           BENCH + "weights_level2.json", "**"))],
    # docs/validation.md, "The interim draws and their weights": the H100 campaign (level2_field_gpu/)
    Fig(VM, "stopped the planned 32,000 images after {} ({} batches of {} lanes:", GPU2D + "validation.json",
        (j("level2.realizations", ",d"), calc(lambda J: {2: "two"}[J(GPU2D + "validation.json", "level2.n_batches")], "s"),
         j("level2.batch_lanes", ",d")), cite="level2_field_gpu/"),
    Fig(VM, "i.e. {} complete seeds of the first grid pair, {} galaxies", GPU2D + "bias_results.json",
        (j("fits.g1.n_groups", "d"), j("fits.g1.n", ",d")), cite="level2_field_gpu/"),
    Fig(VM, "| | value | 1 sigma (jackknife over {} seeds) |", GPU2D + "bias_results.json", (j("fits.g1.n_groups", "d"),),
        cite="level2_field_gpu/"),
    Fig(VM, "Coverage passes (g1 {} / {}, g2 {} / {} at 68% / 95%); {} of the {} galaxies ({}%) have "
        "collapsed population weights at the pooled estimate (proposal importance ESS < 10%: {} of a {}-galaxy "
        "sample, {}%, 95% upper bound {}%); the pooled fits converged with a numerical error of {} in g.", GPU2D + "bias_results.json",
        (*(calc(lambda J, g=g, p=p: J(GPU2D + "bias_results.json", "coverage")[g][p]["observed"], ".3f")
           for g in ("g1", "g2") for p in ("0.68", "0.95")),
         j("population.grid_points", lambda p: str(sum(x["n_collapsed"] for x in p))), j("fits.g1.n", ",d"),
         calc(lambda J: collapsed_pct(J, GPU2D), ".2f"),
         j("ess.below_10pct", "d", GPU2D + "validation.json"), j("ess.galaxies", ",d", GPU2D + "validation.json"),
         j("ess.below_10pct_fraction", lambda v: f"{100 * v:.2f}", GPU2D + "validation.json"),
         j("ess.binomial_95_upper", lambda v: f"{100 * v:.2f}", GPU2D + "validation.json"),
         j("population.grid_points", lambda p: f"{max(max(x['g1_num_err'], x['g2_num_err']) for x in p):.1e}")),
        cite="level2_field_gpu/"),
    Fig(VM, "m1, m2 are consistent with zero at sigma_m ~{}, not yet at the 3e-4 of issue 34. Scaling sigma_m as "
        "1/sqrt(galaxies), 3e-4 needs ~{} million galaxies (~{} images of 32), {}x this run: at the rate measured "
        "here ({} galaxies/s after the compile, the slowest lane setting each batch's time) ~{} minutes of one "
        "H100, plus ~{} minutes of `bias-extract` and `bias-stats` ({} s and {} s here for {} images); 5e-4 needs "
        "~{}x (~{} galaxies). c1 is {} sigma here and was {} +- {} in `level2_interim_2d/`", GPU2D + "validation.json",
        (calc(gpu_sigma_m, lambda v: f"{v * 1e3:.2f}e-3"), calc(lambda J: gpu_factor(J, 3e-4) * J(GPU2D + "bias_results.json", "fits.g1.n") / 1e6, ".1f"),
         calc(lambda J: round(gpu_factor(J, 3e-4) * J(GPU2D + "bias_results.json", "fits.g1.n") / 32, -3), ",.0f"),
         calc(lambda J: gpu_factor(J, 3e-4), ".0f"), j("level2.galaxies_per_s_post_compile", ",.0f"),
         calc(lambda J: gpu_factor(J, 3e-4) * J(GPU2D + "bias_results.json", "fits.g1.n") / J(GPU2D + "validation.json", "level2.galaxies_per_s_post_compile")
              / 60, ".0f"),
         calc(lambda J: gpu_factor(J, 3e-4) * (J(GPU2D + "validation.json", "extract.wall_s") + J(GPU2D + "validation.json", "stats.wall_s")) / 60, ".0f"),
         j("extract.wall_s", ".0f"), j("stats.wall_s", ".0f"), j("level2.realizations", ",d"),
         calc(lambda J: gpu_factor(J, 5e-4), ".1f"),
         calc(lambda J: round(gpu_factor(J, 5e-4) * J(GPU2D + "bias_results.json", "fits.g1.n"), -4), ",.0f"),
         calc(lambda J: J(GPU2D + "validation.json", "result.c1") / J(GPU2D + "validation.json", "result.c1_err"), ".1f"),
         j("c1", "+.4f", VAL + "level2_interim_2d/bias_results.json"),
         j("c1_err", ".4f", VAL + "level2_interim_2d/bias_results.json")), cite="level2_field_gpu/"),
    Fig(VM, "The 3 failed fits of that run (`level2_field_gpu/validation.json`: {} of {} images used)", GPU2D + "validation.json",
        (j("result.n_used", "d"), j("level2.realizations", "d")), cite="level2_field_gpu/validation.json"),
    Fig(VM, "The {} failed fits of that run", GPU2D + "validation.json",
        (calc(lambda J: J(GPU2D + "validation.json", "level2.realizations") - J(GPU2D + "validation.json", "result.n_used"), "d"),),
        cite="level2_field_gpu/validation.json"),
    Fig(VM, "(that batch's lockstep efficiency {})", GPU2D + "validation.json", (j("level2.lockstep_efficiency.2", lambda v: f"{float(v):.2f}"),),
        cite="level2_field_gpu/validation.json"),
    # the CPU campaigns (level2_cpu_2d/, level2_cpu_2d_wide/: bias-stats' printed.txt and bias_results.json)
    Fig(VM, "{} seeds ({} images, {} galaxies used; {} image failed", CPU2D + "printed.txt",
        (txt(r"\((\d+) independent seeds\)"), txt(r"used \d+ of (\d+) realization", conv=int_commas),
         j("fits.g1.n", ",d", CPU2D + "bias_results.json"),
         txt(r"excluded: status failed: (\d+)", conv=lambda n: {"1": "one"}.get(n, n))),
        cite="level2_cpu_2d/"),
    Fig(VM, "the pooled fits' numerical error is {} in m units. Verdict {}.", CPU2D + "printed.txt",
        (txt(r"\((\S+) in m units\)"), txt(r"^verdict: (\w+)")), cite="level2_cpu_2d/"),
    Fig(VM, "the two c1 are {} +- {} and {} +- {}", CPU2D + "bias_results.json",
        (j("result.c1", e3(2), GPU2D + "validation.json"), j("result.c1_err", e3(2, False), GPU2D + "validation.json"),
         j("c1", e3(2)), j("c1_err", e3(2, False))), cite="level2_cpu_2d/"),
    Fig(VM, "from {} galaxies: no additive term tied to the PSF's e1 = 0.01 at that precision, and m1, m2 consistent "
        "with zero at sigma_m ~{}.", CPU2D + "bias_results.json",
        (calc(lambda J: J(CPU2D + "bias_results.json", "fits.g1.n") + J(GPU2D + "bias_results.json", "fits.g1.n"), ",d"),
         calc(lambda J: (ivw("m1", True)(J) + ivw("m2", True)(J)) / 2, lambda v: f"{v * 1e4:.1f}e-4")),
        cite="level2_field_gpu/"),
    Fig(VM, "two CPU devices in one process hang, see [GPUs](gpus.md); how two processes compare with one in "
        "galaxies/s is not recorded), {} images, {} galaxies pooled ({} images failed: optimiser not "
        "converged). `bias-stats --requirement lsst-project` (`printed.txt`, as printed; {} seeds used, {} of "
        "them in whole rings", WIDE + "printed.txt",
        (txt(r"used \d+ of (\d+) realization", conv=int_commas), j("fits.g1.n", ",d", WIDE + "bias_results.json"),
         txt(r"OPT_NOT_CONVERGED: (\d+)"), txt(r"\((\d+) independent seeds\)"),
         txt(r"galaxies of (\d+) seeds")), cite="level2_cpu_2d_wide/"),
    Fig(VM, "the pooled fits' numerical error is at most {} in m units. Verdict {}.", WIDE + "printed.txt",
        (txt(r"\((\S+) in m units\)"), txt(r"^verdict: (\w+)")), cite="level2_cpu_2d_wide/"),
    Fig(VM, "At 2,500 seeds ({} galaxies, `printed_2500.txt`, as printed)", WIDE + "printed_2500.txt",
        (txt(r"pooled per grid point: (\d+) galaxies", conv=int_commas),), cite="level2_cpu_2d_wide/"),
    Fig(VM, "the c1 of {} at 500 seeds was a fluctuation", CPU2D + "bias_results.json", (j("c1", e3(1)),),
        cite="level2_cpu_2d/"),
    # what sigma_m <= 3e-4 costs
    Fig(VM, "The 3,000-seed campaign gives sigma_m x sqrt(galaxies) = {} (`level2_cpu_2d_wide/bias_results.json`: "
        "m1's error x sqrt({})), so sigma_m = 5e-4 needs ~{} galaxies (reached there) and 3e-4 ~{} million.",
        WIDE + "bias_results.json",
        (calc(lambda J: math.sqrt(galaxies_for(J, 1.0)), ".2f"), j("fits.g1.n", ",d"),
         calc(lambda J: round(galaxies_for(J, 5e-4), -4), ",.0f"), calc(lambda J: galaxies_for(J, 3e-4) / 1e6, ".1f")),
        cite="level2_cpu_2d_wide/bias_results.json"),
    Fig(VM, "Level 2 as shipped now runs at {} galaxies/s through `bias-run` after the compile", CAMP,
        (j("measured.median_galaxies_per_s.shipped", ".0f"),)),
    Fig(VM, "On one H100 the config before issue 42 ran at {} galaxies/s after the compile "
        "(`level2_field_gpu/validation.json`)", GPU2D + "validation.json", (j("level2.galaxies_per_s_post_compile", ",.0f"),),
        cite="level2_field_gpu/validation.json"),
    Fig(VM, "with NUTS and VI alike** ({} to {})", NBNUTS,
        (j("rows[0].m1_pairs", ".2f"), j("rows[snr=15].m1", ".2f", NBVI)), cite="noise_bias/"),
    Fig(VM, "its difference from the 32-galaxy joint mode's {}, were computed by hand", L2V, (j("ring.m1", "+.3f"),),
        cite="`level2/`"),
    Fig(VM, "held its batch of {} lanes with it (that batch's lockstep", GPU2D + "validation.json",
        (j("level2.batch_lanes", ",d"),), cite="level2_field_gpu/validation.json"),
    Fig(VM, "the {} new images at `56cca79`", WIDE + "printed.txt",
        (calc(lambda J: int(re.search(r"used \d+ of (\d+)", J(WIDE + "printed.txt", "")).group(1))
              - int(re.search(r"used \d+ of (\d+)", J(CPU2D + "printed.txt", "")).group(1)), ",d"),),
        cite="level2_cpu_2d_wide/"),
    Fig(RM, "one galaxy's fit of {} x 32 takes the most Newton steps", GPU2D + "validation.json",
        (j("level2.batch_lanes", ",d"),), cite="level2_field_gpu/"),
    # the 3e-4 campaign at the shipped config (level2_2d_3e4_tol/, the same run.sh with OUT)
    *[Fig(VM, f"| {c} | " + "{} | {} |", E3T + "printed.txt", stat(c, E3T + "printed.txt"),
          cite="level2_2d_3e4_tol/") for c in ("m1", "m2", "c1", "c2")],
    Fig(VM, "| | value | 1 sigma (jackknife over {} seeds; printed.txt) |", E3T + "printed.txt",
        (txt(r"galaxies of (\d+) seeds"),), cite="level2_2d_3e4_tol/"),
    Fig(VM, "Pooled: {} galaxies.", E3T + "printed.txt",
        (txt(r"pooled per grid point: (\d+) galaxies"),), cite="level2_2d_3e4_tol/"),
    Fig(VM, "intervals: {} and {} (g1),\n{} and {} (g2). {} of {} images failed", E3T + "printed.txt",
        (*(txt(rf"coverage {g} {p}%\s+(\S+)") for g in ("g1", "g2") for p in (68, 95)),
         txt(r"excluded: status failed: (\d+)"), txt(r"used \d+ of (\d+) realization", conv=int_commas)),
        cite="level2_2d_3e4_tol/"),
    Fig(VM, "took {} s in all\n({} minutes; the four array tasks {} s, the growth {} s), {} galaxies/s",
        E3T + "validation.json",
        (j("timing.all_bias_run_processes.wall_sum_s", ".1f"),
         calc(lambda J: J(E3T + "validation.json", "timing.all_bias_run_processes.wall_sum_s") / 60, ".1f"),
         j("timing.array_tasks.wall_sum_s", ".1f"), j("timing.whole_plan_runs.wall_sum_s", ".1f"),
         j("timing.all_bias_run_processes.galaxies_per_process_s", ".1f")), cite="level2_2d_3e4_tol/"),
    Fig(VM, "partials took {} s in all (one after another here; on a cluster each task writes its own\n"
        "when it ends), the reduction {} s and `bias-stats` {} s (peak RSS {} MiB)", E3T + "validation.json",
        (j("timing.bias_extract_partials.wall_sum_s", ".1f"), j("timing.bias_extract.wall_s", ".2f"),
         j("timing.bias_stats.wall_s", ".2f"), j("timing.bias_stats.peak_rss_mib", ".1f")),
        cite="level2_2d_3e4_tol/"),
    # the 3e-4 campaign (level2_2d_3e4/: printed.txt and validation.json, written by run.sh
    # and bench/campaign_record.py)
    *[Fig(VM, f"| {c} | " + "{} | {} |", E3 + "printed.txt", stat(c, E3 + "printed.txt"),
          cite="level2_2d_3e4/") for c in ("m1", "m2", "c1", "c2")],
    Fig(VM, "| | value | 1 sigma (jackknife over {} seeds; printed.txt) |", E3 + "printed.txt",
        (txt(r"galaxies of (\d+) seeds"),), cite="level2_2d_3e4/"),
    Fig(VM, "(consistent with zero; `bias-stats` plans ~{} realizations for c1 to pass, as printed)",
        E3 + "printed.txt", (txt(r"\|c1\|.*?~(\d+) realizations to PASS"),), cite="level2_2d_3e4/"),
    Fig(VM, "{} of {} images failed (`OPT_NOT_CONVERGED`, recorded failed;", E3 + "printed.txt",
        (txt(r"excluded: status failed: (\d+)"), txt(r"used \d+ of (\d+) realization", conv=int_commas)),
        cite="level2_2d_3e4/"),
    Fig(VM, "Pooled: {} galaxies.", E3 + "printed.txt",
        (txt(r"pooled per grid point: (\d+) galaxies"),), cite="level2_2d_3e4/"),
    Fig(VM, "Coverage of the per-realization intervals: {} and {} (g1),\n{} and {} (g2)",
        E3 + "printed.txt",
        tuple(txt(rf"coverage {g} {p}%\s+(\S+)") for g in ("g1", "g2") for p in (68, 95)),
        cite="level2_2d_3e4/"),
    Fig(VM, "spanned {} s (median task {} s)", E3 + "validation.json",
        (j("timing.array_tasks.span_s", ".1f"), j("timing.array_tasks.task_wall_s_median", ".1f")),
        cite="level2_2d_3e4/"),
    Fig(VM, "partials took {} s in all", E3 + "validation.json",
        (j("timing.bias_extract_partials.wall_sum_s", ".1f"),), cite="level2_2d_3e4/"),
    Fig(VM, "realizations from them {} s (peak RSS {} MiB), and `bias-stats` {} s (peak RSS\n{} MiB)",
        E3 + "validation.json",
        (j("timing.bias_extract.wall_s", ".2f"), j("timing.bias_extract.peak_rss_mib", ".1f"),
         j("timing.bias_stats.wall_s", ".2f"), j("timing.bias_stats.peak_rss_mib", ".1f")),
        cite="level2_2d_3e4/"),
    # the H100 campaign (level2_field_gpu/, written by bench/bench_field.py)
    *[Fig(VM, f"| {c} | " + "{} | {} |", GPU2D + "validation.json",
          (j(f"result.{c}", e3(2)), j(f"result.{c}_err", e3(2, False))), cite="level2_field_gpu/")
      for c in ("m1", "m2", "c1", "c2")],
    # stages 2 and 3 at field scale (stages_scale.json)
    *[Fig(BM, f"| {n} | " + "{} | {} | {} | {} |", BENCH + "stages_scale.json",
          (j(f"measured.stats_median.{n}.galaxies", ","), j(f"measured.stats_median.{n}.wall_s", ".1f"),
           j(f"measured.stats_median.{n}.peak_rss_mib", ".0f"),
           j(f"measured.stats_median.{n}.galaxies_per_s", ",.0f")))
      for n in ("small", "campaign", "large")],
    Fig(BM, "{} s for {} realizations, peak RSS {} MiB", BENCH + "stages_scale.json",
        (j("measured.reduction_median.wall_s", ".2f"), j("measured.reduction_median.realizations", ","),
         j("measured.reduction_median.peak_rss_mib", ".0f"))),
    Fig(BM, "and grows by {} bytes per galaxy (the record's `rss_growth`): 2 GiB at ~{} million galaxies",
        BENCH + "stages_scale.json",
        (j("measured.rss_growth.bytes_per_galaxy", ".0f"),
         j("measured.rss_growth.galaxies_at_bound", lambda v: f"{v / 1e6:.0f}"))),
    Fig(BM, "agree on `small` to {} at most over m1, m2, c1, c2 and their errors", BENCH + "stages_scale.json",
        (j("measured.agreement.max_abs_diff", ".2e"),)),
    # the SLURM chaos soak (chaos_slurm.json)
    Fig(BM, "`python bench/chaos_slurm.py --vi-steps {}` (commit `{}`, run from a worktree of it; local "
        "single-node SLURM, 2-core box shared with other developers, load {} at the start)", CHAOS,
        (j("settings.vi_steps", "d"), j("info.git.commit", lambda v: v[:7]),
         j("info.load_average_start[0]", ".1f"))),
    Fig(BM, "a Level 0 campaign of {} realizations (4 shears x {} seeds, {}x{} stamps, float64, "
        "batches of {}) fitted by VI of {} steps", CHAOS,
        (j("campaign.realizations", ","), j("settings.n_realizations", "d"), j("campaign.stamp", "d"),
         j("campaign.stamp", "d"), j("campaign.batch_size", "d"), j("settings.vi_steps", ","))),
    Fig(BM, "as an emitted array of {} tasks, throttle {}. It ran once untouched (the reference: {} s) "
        "and once with its root on a {} MB tmpfs", CHAOS,
        (j("campaign.tasks", "d"), j("campaign.throttle", "d"), j("clean.wall_s", ".0f"),
         j("campaign.tmpfs_mb", "d"))),
    Fig(BM, "injected until each kind had taken effect {} times", CHAOS, (j("campaign.min_effects", "d"),)),
    *[Fig(BM, f"| {row} | " + "{} | {} |", CHAOS,
          (j(f"effects.{kind}.issued", "d"), j(f"effects.{kind}.effective", "d")))
      for kind, row in (
          ("scancel_task", "`scancel` of a running task (re-submitted alone 0-3 s later)"),
          ("scancel_array", "`scancel` of the array (re-submitted 1-5 s later)"),
          ("requeue", "`scontrol requeue` of a running task"),
          ("time_limit", "the running task's end time set to now, a few seconds before slurmctld's "
                         "time-limit check (every 30 s, its phase from a probe job)"),
          ("drain", "the node drained while a campaign task computed on it, until that run ended and a "
                    "job waited 5 s"),
          ("disk_full", "the output tmpfs filled for 3-10 s while an engine computed (never during a "
                        "drain)"))],
    Fig(BM, "Across the {} target runs: {}-{} s old, {}-{} complete realizations written each", CHAOS,
        tuple(calc(lambda J, fn=fn: fn(_chaos_targets(J(CHAOS, "faults"))), "d") for fn in (
            len, lambda t: min(r["elapsed_s"] for r in t), lambda t: max(r["elapsed_s"] for r in t),
            lambda t: min(r["realizations_written"] for r in t),
            lambda t: max(r["realizations_written"] for r in t)))),
    Fig(BM, "all {} ran again after SLURM's 2-minute hold", CHAOS,
        (calc(lambda J: sum(1 for f in J(CHAOS, "faults") if f["kind"] == "requeue"
                            and f["effect"]["evidence"].get("ran_again")), "d"),)),
    Fig(BM, "all {} hit a task whose engine was computing", CHAOS,
        (calc(lambda J: sum(1 for f in J(CHAOS, "faults") if f["kind"] == "time_limit"
                            and f["target"]["phase"] == "computing"), "d"),)),
    Fig(BM, "Drains: each lasted {}-{} s", CHAOS,
        tuple(calc(lambda J, agg=agg: agg(f["effect"]["evidence"]["drained_s"] for f in J(CHAOS, "faults")
                                          if f["kind"] == "drain"), ".1f") for agg in (min, max))),
    Fig(BM, "and in {} of the {} also campaign tasks pending for the node", CHAOS,
        (calc(lambda J: sum(any("_" in k for k in f["effect"]["evidence"]["refused_while_drained"])
                            for f in J(CHAOS, "faults") if f["kind"] == "drain"), "d"),
         j("effects.drain.effective", "d"))),
    Fig(BM, "Nothing lost: {} of {} realizations complete and bit-identical", CHAOS,
        (j("compare.bit_identical", ","), j("campaign.realizations", ","))),
    Fig(BM, "({} computed in batches that landed against {} planned", CHAOS,
        (j("chaos.logs.computed_in_landed_batches", ","), j("campaign.realizations", ","))),
    Fig(BM, "{} task runs against {}; SLURM's record of them: {} completed, {} cancelled, {} requeued, "
        "{} timed out, {} failed (the disk fills)", CHAOS,
        (j("chaos.logs.task_runs", "d"), j("clean.logs.task_runs", "d"),
         *(j(f"chaos.jobcomp.{k}", "d") for k in ("COMPLETED", "CANCELLED", "PENDING", "TIMEOUT",
                                                  "FAILED")))),
    Fig(BM, "Exit status of the runs the counted fills were aimed at: all {} ended with bias-run's 4",
        CHAOS, (calc(lambda J: sum(
            c == "4:0" for f in J(CHAOS, "faults") if f["kind"] == "disk_full" and f["effect"]["ok"]
            for c in f["effect"]["evidence"]["exit_codes"].values()), "d"),)),
    Fig(BM, "Wall: {} s against {} s", CHAOS, (j("chaos.wall_s", ",.0f"), j("clean.wall_s", ".0f"))),
    Fig(BM, "the soak took {} s in all, load {} at the start, {} at the end", CHAOS,
        (j("total_runtime_s", ",.0f"), j("info.load_average_start[0]", ".1f"),
         j("load_average_end[0]", ".1f"))),
    # README.md
    Fig(RM, "2,350,848 pooled galaxies".replace("2,350,848", "{}"), E3T + "validation.json",
        (j("galaxies.used", ","),), cite="level2_2d_3e4_tol/"),
    Fig(RM, "a campaign on the 2-D grid (`results/validation/level2_2d_3e4_tol/`, the 2-core CPU) planned at {} "
        "seeds gave m1's error at {}, just above the 3e-4 target, so it was grown to {} seeds", E3T + "validation.json",
        (txt(r" grown: n (\d+) -> ", E3T + "grow.log", conv=int_commas),
         txt(r" grown: n \d+ -> \d+ \(\S+ seeds gave m1_err (\S+), above 3e-4\)", E3T + "grow.log"),
         j("seeds.planned", ",d")), cite="level2_2d_3e4_tol/"),
    Fig(RM, "`bias-run` took {} minutes in all (both rounds), stage 2 from the array tasks'\npartials in {} s and "
        "`bias-stats`' streamed pooled fit in {} s (peak RSS {}\nMiB)", E3T + "validation.json",
        (calc(lambda J: J(E3T + "validation.json", "timing.all_bias_run_processes.wall_sum_s") / 60, ".1f"),
         j("timing.bias_extract.wall_s", ".2f"), j("timing.bias_stats.wall_s", ".2f"),
         j("timing.bias_stats.peak_rss_mib", ".1f")), cite="level2_2d_3e4_tol/"),
    Fig(RM, "m1 = {} +- {}, m2 = {} +-\n{} (both PASS |m| < 1e-3 at sigma_m below 3e-4), c1 = {} +- {}, c2 =\n"
        "{} +- {};", E3T + "bias_results.json",
        tuple(j(c + e, e3(2, not e)) for c in ("m1", "m2", "c1", "c2") for e in ("", "_err")), cite="level2_2d_3e4_tol/"),
    Fig(RM, "{} galaxies: m1 = {} +- {}, m2 = {} +- {}, c1 = {} +- {}, c2 = {} +- {}; with the H100 run, sigma_m "
        "~{}.", CPU2D + "bias_results.json",
        (j("fits.g1.n", ",d"), *(j(c + e, e3(1, not e)) for c in ("m1", "m2", "c1", "c2") for e in ("", "_err")),
         calc(lambda J: (ivw("m1", True)(J) + ivw("m2", True)(J)) / 2, lambda v: f"{v * 1e4:.1f}e-4")),
        cite="level2_cpu_2d/"),
    Fig(RM, "Grown to 3,000 seeds (`results/validation/level2_cpu_2d_wide/`, {} galaxies", WIDE + "bias_results.json",
        (j("fits.g1.n", ",d"),), cite="level2_cpu_2d_wide/"),
    Fig(RM, "sigma_m = 3e-4 needs ~{} million galaxies", WIDE + "bias_results.json",
        (calc(lambda J: galaxies_for(J, 3e-4) / 1e6, ".1f"),), cite="level2_cpu_2d_wide/"),
    Fig(RM, "galaxies, two array tasks on the 2-core CPU): m1 = {} +- {}, m2 = {} +- {}, c1 = {} "
        "+- {}, c2 = {} +- {}.", WIDE + "bias_results.json",
        tuple(j(c + e, e3(2, not e)) for c in ("m1", "m2", "c1", "c2") for e in ("", "_err")),
        cite="level2_cpu_2d_wide/"),
    Fig(RM, "Gauss-Newton steps, and stops exact Newton at half-decrement 1e-5: {} Level 2 galaxies/s through "
        "`bias-run` after the compile on the 2-core CPU, {}x before", CAMP, (j("measured.median_galaxies_per_s.shipped", ".0f"), j("measured.ratio", ".2f"))),
    Fig(RM, "which on real Level 2 galaxies moves m by about {} at 100 draws", RATE,
        (calc(study_row(100, "none.dm"), lambda v: f"{v * 1e3:.1f}e-3"),), cite="level2_rate.json"),
    # README.md: cost per galaxy (cost.json), NUTS (nuts_level2_band*.json), GPU (gpu.json, gpu_logs/)
    *[Fig(RM, f"| {cfg} | {m} | {opt} | " + "{} | {} |", BENCH + "cost.json", vals,
          cite="results/benchmarks/cost.json")
      for cfg, m, opt, vals in (
          ("`level2.yaml` population, joint model (16x16 Moffat stamps)", "8 / 32 / 128", "gauss_newton",
           (calc(lambda J: " / ".join(f"{J(BENCH + 'cost.json', f'vs_m[{i}].galaxies_per_s'):.0f}" for i in (2, 4, 5)),
                 "s"), j("vs_m[4].mib_per_galaxy_lane", ".2f"))),
          ("`level2.yaml`", "32", "newton", (j("vs_m[3].galaxies_per_s", ".0f"), j("vs_m[3].mib_per_galaxy_lane", ".2f"))),
          ("`survey_snr30.yaml`", "1", "gauss_newton / newton",
           (calc(lambda J: f"{J(BENCH + 'cost.json', 'vs_config[3].galaxies_per_s'):.0f} / "
                           f"{J(BENCH + 'cost.json', 'vs_config[2].galaxies_per_s'):.0f}", "s"),
            j("vs_config[3].mib_per_galaxy_lane", ".2f"))),
          ("`level0.yaml` (48x48, S/N 1.2e5)", "1", "gauss_newton / newton",
           (calc(lambda J: f"{J(BENCH + 'cost.json', 'vs_config[1].galaxies_per_s'):.0f} / "
                           f"{J(BENCH + 'cost.json', 'vs_config[0].galaxies_per_s'):.0f}", "s"),
            j("vs_config[1].mib_per_galaxy_lane", ".2f"))))],
    Fig(RM, "a whole Level 0 campaign (write included) runs at {} realizations/s after the first batch",
        BENCH + "throughput_template.json", (j("target[mode=threads].realizations_per_s", ".0f"),)),
    Fig(RM, "100 warm-up / 600 draws x 4 chains): {}-{} s per image of 32 galaxies, R-hat(g) <= 1.01 and ESS(g) >= "
        "400 in {} of {} benchmark images", NL2B,
        (j("rows[1].s_per_realization", ".1f"), j("rows[1].s_per_realization", ".1f", NL2BA),
         j("rows[1].n_meet", "d", NL2BA), j("rows[1].n", "d", NL2BA)), cite="nuts_level2_band_at.json"),
    Fig(RM, "| {} s on one H100 ({} passed; `ci/gpu_check.sh` with the GPU record: {} s;", BENCH + "gpu_logs/pytest_gpu.log",
        (txt(r"^\d+ passed in ([\d.]+)s"), txt(r"^(\d+) passed in"),
         txt(r"gpu_check \+(\d+) s\] tests exit", BENCH + "gpu_logs/gpu_check.log")),
        cite="results/benchmarks/gpu_logs/"),
    Fig(RM, "passed there ({} tests, with the GPU record of", BENCH + "gpu_logs/pytest_gpu.log",
        (txt(r"^(\d+) passed in"),), cite="gpu_logs/pytest_gpu.log"),
    Fig(RM, "compile {} s, then {} ms per galaxy, {}% of galaxies meet R-hat <= 1.01 and bulk ESS >= 400, {} MiB per "
        "lane", GPUJ, (j("nuts.compile_s", ".0f"), j("nuts.ms_per_galaxy", ".1f"),
                       j("nuts.convergence.frac_galaxies_ok", lambda v: f"{100 * v:.1f}"),
                       j("nuts.memory_per_lane_MiB", ".1f")), cite="gpu.json"),
    Fig(RM, "| `--batch-size auto` picked | {} lanes ({}) | {} lanes (the cap; {} would fit) | {} lanes (the memory "
        "budget: {} MiB per lane, {} GiB) |", GPU2D + "validation.json",
        (j("level0.summary.auto_batch", ",d", GPUJ), j("level0.summary.auto_bound", "s", GPUJ),
         j("level0.batch_lanes", ",d"), j("level0.auto.lanes_that_fit", ",d"),
         j("level2.batch_lanes", ",d"), j("level2.memory_per_lane_MiB", ".1f"),
         j("level2.auto.budget_bytes", lambda v: f"{v / 2**30:.1f}")), cite="level2_field_gpu/"),
    Fig(RM, "| warm, end to end | {} realizations/s (batch {}) | {} / {} realizations/s after the first batch | {} "
        "galaxies/s after the compile |", GPU2D + "validation.json",
        (j("level0.summary.realizations_per_s_warm", ".0f", GPUJ), j("level0.summary.warm_batch_lanes", ",d", GPUJ),
         j("level0.realizations_per_s_after_batch_1", ",.0f"),
         j("level0.realizations_per_s_after_batch_1", ",.0f", FIELD),
         j("level2.galaxies_per_s_post_compile", ",.0f")), cite="level2_field_gpu/"),
    Fig(RM, "| device share of a warm batch | {} | {}-{} (host {}-{} ms per realization) | {} (host fraction {}) |",
        GPU2D + "validation.json",
        (j("level0.summary.host_fraction_warm_median", lambda v: f"{1 - v:.2f}", GPUJ),
         j("level0.host_fraction_warm_median", lambda v: f"{1 - v:.2f}"),
         j("level0.host_fraction_warm_median", lambda v: f"{1 - v:.2f}", FIELD),
         j("level0.host_ms_per_realization_warm", ".2f"), j("level0.host_ms_per_realization_warm", ".2f", FIELD),
         j("level2.host_fraction_warm_median", lambda v: f"{1 - v:.2f}"),
         j("level2.host_fraction_warm_median", ".2f")), cite="level2_field_gpu/"),
    Fig(RM, "| whole process (compile included) | | {} / {} realizations/s ({} / {}) | "
        "{} images in {} s (time limit) |", GPU2D + "validation.json",
        (j("level0.realizations_per_s_end_to_end", ".0f"), j("level0.realizations_per_s_end_to_end", ".0f", FIELD),
         j("level0.realizations", ",d"), j("level0.realizations", ",d", FIELD), j("level2.realizations", ",d"),
         j("level2.process_wall_s", ".0f")), cite="level2_field_gpu/"),
    Fig(RM, "(lockstep efficiency {}-{}:", GPU2D + "validation.json",
        (j("level2.lockstep_efficiency", lambda v: f"{min(map(float, v.values())):.2f}"),
         j("level2.lockstep_efficiency", lambda v: f"{max(map(float, v.values())):.2f}")), cite="level2_field_gpu/"),
    Fig(RM, "on the same node: m1 = {} +- {}, m2 = {} +- {}, c1 = {} +- {}, c2 = {} +- {} from {} galaxies, coverage "
        "passing, {}% of galaxies with collapsed weights", GPU2D + "validation.json",
        (*(j(f"result.{c}{e}", e3(1, not e)) for c in ("m1", "m2", "c1", "c2") for e in ("", "_err")),
         j("fits.g1.n", ",d", GPU2D + "bias_results.json"), calc(lambda J: collapsed_pct(J, GPU2D), ".2f")),
        cite="level2_field_gpu/"),
    Fig(RM, "The Level 2 campaign through `bias-extract` ({} s) and `bias-stats --requirement "
        "lsst-project` ({} s)", GPU2D + "validation.json",
        (j("extract.wall_s", ".0f"), j("stats.wall_s", ".0f")), cite="level2_field_gpu/"),
]  # fmt: skip


# docs/benchmarks.md: the sections before "Host work per realization"
FIGURES += [
    Fig(BM, "Gaussian {}, elliptical Gaussian {}, Moffat beta 3.5 (elliptical) {}, truncated Moffat {} "
        "stamps/s; value + gradient: {}, {}, {}, {} stamps/s", RENDER,
        tuple(calc(rows_where(RENDER, "results.stamps_per_s", psf=psf, dtype="float32", mode=mode,
                              batching=CHUNK64), ",.0f")
              for mode in ("forward", "value_and_grad")
              for psf in ("gaussian", "gaussian_e", "moffat", "moffat_trunc"))),
    Fig(BM, "load average {} at the start; 48x48 stamps, median of {} repeats", RENDER,
        (j("load_average_start[0]", ".1f"), j("settings.repeats", "d"))),
    Fig(BM, "{}-{} realizations/s for the compiled step (best at batch 16); `bias-run` of 64 "
        "realizations {} s with a cold compilation cache, {} s warm", MAPJ,
        (calc(lambda J: min(v["realizations_per_s"] for v in J(MAPJ, "inference_only").values()), ".0f"),
         calc(lambda J: max(v["realizations_per_s"] for v in J(MAPJ, "inference_only").values()), ".0f"),
         j("end_to_end.cold_s.median", ".1f"), j("end_to_end.warm_s.median", ".1f"))),
    Fig(BM, "keeps {} (warmup) and {} (sampling) of the leapfrog work useful against {} and {} uncapped; "
        "wall {} s -> {} s; median bulk ESS of g1 {} -> {}, the lowest bulk ESS over all latents "
        "{} -> {}", NUTS,
        (j("runs[3].capped.lockstep_efficiency.warmup", ".2f"),
         j("runs[3].capped.lockstep_efficiency.sampling", ".2f"),
         j("runs[3].ours.lockstep_efficiency.warmup", ".2f"),
         j("runs[3].ours.lockstep_efficiency.sampling", ".2f"),
         j("runs[3].ours.wall_s", ".0f"), j("runs[3].capped.wall_s", ".0f"),
         j("runs[3].ours.ess_bulk_g1.median", ".0f"), j("runs[3].capped.ess_bulk_g1.median", ".0f"),
         j("runs[3].ours.ess_bulk_min_all_sites", ".0f"),
         j("runs[3].capped.ess_bulk_min_all_sites", ".0f"))),
    Fig(BM, "Its median ESS/s per realization is {}x (homogeneous batch) to {}x (one hard lane)", NUTS,
        (j("runs[3].ratio_median_ess_per_s_capped_over_joint", ".1f"),
         j("runs[6].ratio_median_ess_per_s_capped_over_joint", ".1f"))),
    # bias-stats on an interim-model campaign (stats.json)
    Fig(BM, "shared: load {}-{})", BENCH + "stats.json",
        (j("runs.after.load_average_start[0]", ".1f"), j("load_average_end[0]", ".1f"))),
    Fig(BM, "Before (`5640e18`, one run): {} s (extraction {} s, pooled fit and figures {} s, report "
        "{} s), peak RSS {} GB. After: {} s median of {} (startup {} s, extraction {} s, fit {} s, "
        "report {} s), peak RSS {} GB in the main process, {} GB for the process tree", BENCH + "stats.json",
        (*(j(f"runs.before.median.{k}", ".0f") for k in ("wall_s", "extraction_s", "fit_s", "report_s")),
         j("runs.before.median.peak_rss_main_mb", lambda v: f"{v / 1e3:.1f}"),
         j("runs.after.median.wall_s", ".1f"), j("settings.repeats", "d"),
         *(j(f"runs.after.median.{k}", ".1f") for k in ("startup_s", "extraction_s", "fit_s", "report_s")),
         j("runs.after.median.peak_rss_main_mb", lambda v: f"{v / 1e3:.2f}"),
         j("runs.after.median.peak_rss_tree_mb", lambda v: f"{v / 1e3:.2f}"))),
    Fig(BM, "(12 bytes per draw: {} GB here)", BENCH + "stats.json",
        (j("runs.after.median.sidecar_mb", lambda v: f"{v / 1e3:.2f}"),)),
    # memory per lane (lane_memory.json)
    Fig(BM, "is {} MiB per lane in float64 and {} MiB in float32", BENCH + "lane_memory.json",
        tuple(j(f"by_dtype.{t}.bytes_per_lane", lambda v: f"{v / 2**20:.2f}") for t in ("float64", "float32"))),
    # the SLURM array (slurm.json)
    Fig(BM, "load average {}-{} from other developers' work", BENCH + "slurm.json",
        (j("info.load_average_start[0]", ".0f"), j("load_average_end[0]", ".0f"))),
    Fig(BM, "| the array's end (all 16 realizations written) | {} s | | the dependent job's end "
        "(`summary.csv`, `bias_results.json`, plots) | {} s | | *for comparison: the same campaign in one "
        "process, cache warm, + extract + stats* | *{} s* | | *the same in one process with 2 CPU devices* "
        "| *{} s* |", BENCH + "slurm.json",
        tuple(j(k, ".0f") for k in ("sbatch_to_array_done_s", "sbatch_to_stats_done_s", "single_process_s",
                                     "multi_device_process_s"))),
    Fig(BM, "| first to take the lock | {} / {} (it compiled) | {} s | {} s | | started with it | {} / {} | "
        "{} s | {} s | | second wave (two tasks) | {} / {} each | {} s | {}-{} s |", BENCH + "slurm.json",
        (*(j(f"tasks[{t}].{k}", ".0f") for t in (1, 0) for k in ("cache_hits", "cache_misses",
                                                                   "lock_wait_s", "logged_span_s")),
         j("tasks[2].cache_hits", "d"), j("tasks[2].cache_misses", "d"), j("tasks[2].lock_wait_s", ".0f"),
         j("tasks[2].logged_span_s", ".0f"), j("tasks[3].logged_span_s", ".0f"))),
    Fig(BM, "spends {}-{} s between its first and last log line", BENCH + "slurm.json",
        (j("tasks[2].logged_span_s", ".0f"), j("tasks[3].logged_span_s", ".0f"))),
    # a later process's cold start (cold_start.json)
    Fig(BM, "the 2-core CPU at load average {}-{} from other work", COLD,
        (calc(lambda J: min(J(COLD, "info.load_average_start") + J(COLD, "load_average_end")), ".0f"),
         calc(lambda J: max(J(COLD, "info.load_average_start") + J(COLD, "load_average_end")), ".1f"))),
    Fig(BM, "| set-up (programs built, traced or loaded, compiled) | {} s | {} s | | persistent-cache hits / "
        "misses | {} / {} | {} / {} | | programs exported / loaded | {} / {} | {} / {} | | (set-up + batch 1 "
        "inference) / a warm batch's inference, per pair | {}, {}, {} | {}, {}, {} |", COLD,
        (j("summary.before.second_process.setup_s", ".1f"), j("summary.after.second_process.setup_s", ".1f"),
         *(calc(lambda J, m=m, k=k: statistics.median(r["second_process"][k] for r in J(COLD, f"runs.{m}")),
                "d") for m in ("before", "after") for k in ("cache_hits", "cache_misses")),
         *(calc(lambda J, m=m, k=k: statistics.median(r["second_process"][k] for r in J(COLD, f"runs.{m}")),
                "d") for m in ("before", "after") for k in ("exported", "loaded")),
         *(j(f"runs.{m}[{i}].second_process.first_over_warm_inference", ".2f")
           for m in ("before", "after") for i in range(3)))),
    Fig(BM, "In this record the ratio is {}-{} after against {}-{} before", COLD,
        tuple(calc(lambda J, m=m, agg=agg: agg(r["second_process"]["first_over_warm_inference"]
                                               for r in J(COLD, f"runs.{m}")), ".2f")
              for m in ("after", "before") for agg in (min, max))),
    Fig(BM, "The set-up that remains ({}-{} s in this record)", COLD,
        tuple(calc(lambda J, agg=agg: agg(r["second_process"]["setup_s"] for r in J(COLD, "runs.after")), ".1f")
              for agg in (min, max))),
    Fig(BM, "the first batch's generator call ({} s, against {}-{} s before)", COLD,
        (j("summary.after.second_process.first_simulation_s", ".1f"),
         *(calc(lambda J, agg=agg: agg(r["second_process"]["first_simulation_s"] for r in J(COLD, "runs.before")),
                ".1f") for agg in (min, max)))),
    Fig(BM, "(set-up {} s against {} s, CPU {} s both, medians", COLD,
        (j("summary.after.first_process.setup_s", ".1f"), j("summary.before.first_process.setup_s", ".1f"),
         j("summary.after.first_process.process_cpu_s", ".0f"))),
    Fig(BM, "{} s against {} s, CPU {} s both", COLD,
        (j("summary.after.first_process.setup_s", ".1f"), j("summary.before.first_process.setup_s", ".1f"),
         j("summary.before.first_process.process_cpu_s", ".0f"))),
    # overlapped writing (throughput.json, one run of each mode)
    *[Fig(BM, text, THR, vals, cite="results/benchmarks/throughput.{json,png}") for text, vals in (
        ("load average {}-{}, JAX 0.10.2", tuple(calc(lambda J, agg=agg: agg(
            [J(THR, "load_average_start[0]"), J(THR, "load_average_end[0]")]
            + [x["load_average"][i] for x in J(THR, "target") + J(THR, "sweep") for i in (0, 1)]), ".1f")
            for agg in (min, max))),
        ("| realizations/s | {} | {} | {} | {} |",
         tuple(j(f"target[mode={m}].realizations_per_s", ".1f")
               for m in ("unchunked", "serial", "threads", "processes"))),
        ("| serial, realizations/s | {} | {} | {} | {} | {} | {} |",
         tuple(calc(rows_where(THR, "sweep.realizations_per_s", batch_size=b, mode="serial"), ".1f")
               for b in (1, 4, 16, 64, 256, 1024))),
        ("| overlapped, realizations/s | {} | {} | {} | {} | {} | {} |",
         tuple(calc(rows_where(THR, "sweep.realizations_per_s", batch_size=b, mode="threads"), ".1f")
               for b in (1, 4, 16, 64, 256, 1024))),
        ("Inference is now {} ms CPU per realization at batch 64 ({} ms unchunked), writing {} ms: writing "
         "dominates, so overlapping can hide at most the inference (bound {}x)",
         (j("cpu_per_realization.inference_cpu_ms", ".1f"),
          j("cpu_per_realization.inference_unchunked_cpu_ms", ".1f"),
          j("cpu_per_realization.records_and_write_cpu_ms", ".1f"),
          j("cpu_per_realization.overlap_speedup_bound", ".2f"))),
        ("posterior.nc: {} ms CPU per file through xarray, {} ms with netCDF4 directly ({}x; medians over 50 files",
         (j("write_cost.xarray_datatree.cpu_ms", ".1f"), j("write_cost.netcdf4_direct.cpu_ms", ".1f"),
          j("write_cost.ratio_cpu", ".1f"))),
        ("inference {} ms, building the records and writing the three files {} ms. On two cores, hiding one "
         "behind the other can at best take the larger of the two: ({} + {}) / {} = {}x over serial, whatever "
         "the writer kind; measured {}x (threads: the records are built under the GIL) and {}x (processes). "
         "Against the path before lane chunking (serial, unchunked) the run is {}x (threads) and {}x "
         "(processes).",
         (j("cpu_per_realization.inference_cpu_ms", ".1f"),
          j("cpu_per_realization.records_and_write_cpu_ms", ".1f"),
          j("cpu_per_realization.inference_cpu_ms", ".1f"),
          j("cpu_per_realization.records_and_write_cpu_ms", ".1f"),
          j("cpu_per_realization.records_and_write_cpu_ms", ".1f"),
          j("cpu_per_realization.overlap_speedup_bound", ".2f"),
          j("speedup.threads", ".2f"), j("speedup.processes", ".2f"),
          j("speedup_over_unchunked_serial.threads", ".2f"),
          j("speedup_over_unchunked_serial.processes", ".2f"))),
    )],
    # host work per realization (host.json, throughput.json, throughput_template.json)
    Fig(BM, "on the 2-core box at load average {} at its start", HOST, (j("load_average_start[0]", ".1f"),)),
    Fig(BM, "(issue 33: faster than the {} realizations/s of `403a300`, `throughput.json`)", THR,
        (j("target[mode=threads].realizations_per_s", ".1f"),)),
    Fig(BM, "campaign on the other core (load {}-{})", BENCH + "throughput_template.json",
        tuple(calc(lambda J, agg=agg: agg(
            [J(BENCH + "throughput_template.json", "load_average_start[0]"),
             J(BENCH + "throughput_template.json", "load_average_end[0]")]
            + [x["load_average"][i] for x in J(BENCH + "throughput_template.json", "target") for i in (0, 1)]),
            ".1f") for agg in (min, max))),
    # lanes in chunks on CPU (chunking.json)
    Fig(BM, "quiet: load {}-{}, float64, median of 3 calls", BENCH + "chunking.json",
        load_range(BENCH + "chunking.json"), cite="results/benchmarks/chunking.{json,png}"),
    *[Fig(BM, f"| {name} | " + " | ".join("{}" if c == 0 else ("{} ({}x)" if c in chunks else "-")
                                          for c in (0, 4, 8, 16, 32)) + " |", BENCH + "chunking.json",
          tuple(v for c in (0, *chunks) for v in (
              (calc(chunk_row(cfg, method, batch, c, "ms_per_realization"), fmt),)
              + ((calc(chunk_row(cfg, method, batch, c, "speedup"), ".1f"),) if c else ()))),
          cite="results/benchmarks/chunking.{json,png}")
      for name, cfg, method, batch, chunks, fmt in (
          ("Level 0, 48x48, MAP, batch 16", "level0", "map", 16, (4, 8), ".1f"),
          ("Level 0, 48x48, MAP, batch 64", "level0", "map", 64, (4, 8, 16, 32), ".1f"),
          ("Level 0, 48x48, MAP, batch 256", "level0", "map", 256, (4, 8, 16, 32), ".1f"),
          ("survey S/N 30, 32x32, MAP, batch 64", "survey_snr30", "map", 64, (4, 8, 16, 32), ".1f"),
          ("survey S/N 30, 32x32, MAP, batch 256", "survey_snr30", "map", 256, (4, 8, 16, 32), ".1f"),
          ("survey S/N 30, 32x32, VI, batch 32", "survey_snr30", "vi", 32, (4, 8, 16), ".0f"),
          ("survey S/N 30, 32x32, NUTS, batch 8", "survey_snr30", "nuts", 8, (4,), ",.0f"))],
    Fig(BM, "Per realization the chunked MAP is {}-{}x faster and no longer slows down with the batch ({}-{} ms "
        "from 16 to 256 lanes at Level 0, where one `vmap` went from {} to {} ms).", BENCH + "chunking.json",
        (*(calc(lambda J, agg=agg: agg(r["speedup"] for r in J(BENCH + "chunking.json", "rows")
                                       if r["method"] == "map" and r["chunk"] == 4), ".1f") for agg in (min, max)),
         *(calc(lambda J, agg=agg: agg(r["ms_per_realization"] for r in J(BENCH + "chunking.json", "rows")
                                       if r["config"] == "configs/level0.yaml" and r["chunk"] == 4), ".1f")
           for agg in (min, max)),
         calc(chunk_row("level0", "map", 16, 0, "ms_per_realization"), ".1f"),
         calc(chunk_row("level0", "map", 256, 0, "ms_per_realization"), ".1f")),
        cite="results/benchmarks/chunking.{json,png}"),
    Fig(BM, "run {}x and {}x as fast in chunks", BENCH + "chunking.json",
        (calc(chunk_row("survey_snr30", "vi", 32, 4, "speedup"), ".1f"),
         calc(chunk_row("survey_snr30", "nuts", 8, 4, "speedup"), ".2f")),
        cite="results/benchmarks/chunking.{json,png}"),
    # MAP lanes refilled from the batch (lockstep.json, lockstep_chunk4.json)
    Fig(BM, "load {}-{}: its own\ntwo threads after a test run", LOCK,
        tuple(calc(lambda J, agg=agg: agg([J(LOCK, "load_average_start[0]"), J(LOCK, "load_average_end[0]")]
                                          + [r["load"] for r in J(LOCK, "rows")]), ".1f") for agg in (min, max)),
        cite="results/benchmarks/lockstep.{json,png}"),
    *[Fig(BM, f"| {name} | " + "{}, {}, {} | {} | {}, {}, {} | {}, {}, {} |", LOCK,
          (*(j(f"summary.{key}.efficiency_per_batch[{i}]", ".2f") for i in range(3)),
           j(f"summary.{key}.efficiency_pooled", ".2f"),
           *(j(f"summary.{key}.seconds_per_batch[{i}]", ".2f") for i in range(3)),
           *(j(f"summary.{key}.fit_seconds_per_batch[{i}]", ".2f") for i in range(3))),
          cite="results/benchmarks/lockstep.{json,png}")
      for name, key in (("lockstep (one `vmap` of 32)", "lockstep_32"), ("refilled, 8 lanes", "refill_8"))],
    Fig(BM, "gave {}, {} and {} for the same batches", LOCK,
        tuple(calc(rows_where(LOCK, "rows.efficiency_one_loop", program="lockstep", batch=i), ".2f")
              for i in range(3)), cite="results/benchmarks/lockstep.{json,png}"),
    Fig(BM, "The batch whose slowest fit took {} steps (the others' at most {}) ran {}x faster; the other two "
        "{}x and {}x.", LOCK,
        (calc(rows_where(LOCK, "rows.max_steps", program="lockstep", batch=1), "d"),
         calc(lambda J: max(J(LOCK, f"rows[{i}].max_steps") for i in (0, 2)), "d"),
         *(calc(lambda J, i=i: J(LOCK, f"summary.lockstep_32.seconds_per_batch[{i}]")
                / J(LOCK, f"summary.refill_8.seconds_per_batch[{i}]"), f) for i, f in ((1, ".1f"), (0, ".2f"),
                                                                                       (2, ".2f")))),
        cite="results/benchmarks/lockstep.{json,png}"),
    Fig(BM, "efficiency {} -> {} pooled ({} -> {} on the slow batch), {} s per batch both", LOCK4,
        (j("summary.lockstep_4.efficiency_pooled", ".2f"), j("summary.refill_4.efficiency_pooled", ".2f"),
         j("summary.lockstep_4.efficiency_per_batch[1]", ".2f"), j("summary.refill_4.efficiency_per_batch[1]", ".2f"),
         j("summary.lockstep_4.median_seconds_per_batch", ".2f")),
        cite="results/benchmarks/lockstep_chunk4.{json,png}"),
    Fig(BM, "pooled ({} -> {} on the slow batch), {} s per batch both", LOCK4,
        (j("summary.lockstep_4.efficiency_per_batch[1]", ".2f"), j("summary.refill_4.efficiency_per_batch[1]", ".2f"),
         j("summary.refill_4.median_seconds_per_batch", ".2f")),
        cite="results/benchmarks/lockstep_chunk4.{json,png}"),
    # NUTS at Level 2 and at survey S/N 30 (nuts_level2.json, nuts_level2_band.json, nuts_level2_band_at.json)
    *[Fig(BM, f"| {setting} | {renderer} | {b}" + "{}" + f"{b} | {b}" + "{} of {}" + f"{b} | "
          + "{} / {} | {} | {} x {} ms ({}%) |", rec,
          (j(f"rows[{i}].s_per_realization", ".1f"), j(f"rows[{i}].n_meet", "d"), j(f"rows[{i}].n", "d"),
           j(f"rows[{i}].ess_g_min", ",.0f"), j(f"rows[{i}].ess_g_median", ",.0f"), j(f"rows[{i}].rhat_g_max", ".4f"),
           j(f"rows[{i}].leapfrog_steps_per_call", ",.0f"), j(f"rows[{i}].value_and_grad_s", lambda v: f"{v * 1e3:.2f}"),
           j(f"rows[{i}].gradient_share", lambda v: f"{v * 100:.0f}")), cite=rec.rsplit("/", 1)[1])
      for setting, renderer, rec, i, b in (
          ("200 / 500 x 4, depth 4 / 3 (level2.yaml before)", "every alias", NL2, 0, ""),
          ("100 / 400 x 4, depth 3 / 3", "every alias", NL2, 1, ""),
          ("100 / 600 x 4, depth 3 / 3", "every alias", NL2, 2, ""),
          ("100 / 500 x 4, depth 3 / 3", "alias band 0.75, zero-padded", NL2B, 0, ""),
          ("100 / 600 x 4, depth 3 / 3", "alias band 0.75, zero-padded", NL2B, 1, ""),
          ("100 / 500 x 4, depth 3 / 3", "alias band 0.75, as shipped", NL2BA, 0, ""),
          ("**100 / 600 x 4, depth 3 / 3 (level2.yaml now)**", "alias band 0.75, as shipped", NL2BA, 1, "**"))],
    Fig(BM, "Quiet machine (load {}-{})", NL2, tuple(calc(lambda J, agg=agg: agg(
        v for r in (NL2, NL2B, NL2BA) for k in ("load_average_start", "load_average_end") for v in J(r, k)), ".1f")
        for agg in (min, max)), cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "ESS within {}%), so their rows differ in time, by {}-{}% in the gradient and {}-{}% in the wall",
        NL2BA, (calc(lambda J: 100 * max(abs(J(NL2BA, f"rows[{i}].{k}") / J(NL2B, f"rows[{i}].{k}") - 1)
                                         for i in (0, 1) for k in ("ess_g_min", "ess_g_median")), ".0f"),
                *(calc(lambda J, agg=agg, k=k: 100 * agg(J(NL2BA, f"rows[{i}].{k}") / J(NL2B, f"rows[{i}].{k}") - 1
                                                         for i in (0, 1)), ".0f")
                  for k in ("value_and_grad_s", "s_per_realization") for agg in (min, max))),
        cite="_band_at.json"),
    Fig(BM, "**What bounds it.** {}-{}% of the wall is the potential's gradient", NL2,
        tuple(calc(lambda J, agg=agg: 100 * agg(r["gradient_share"] for p in (NL2, NL2B, NL2BA)
                                                for r in J(p, "rows") if r["config"] == "level2"), ".0f")
              for agg in (min, max)), cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "adapts to step {}-{} and also runs {} steps per draw (ESS per draw {} with 100 warm-up iterations, {} "
        "with 200), where Level 2 gets {}-{}", NL2,
        (j("gaussian_reference[0].step_size_median", ".2f", NL2B), j("gaussian_reference[0].step_size_median", ".2f"),
         j("gaussian_reference[0].n_steps_mean", ".0f"),
         j("gaussian_reference[0].ess_per_draw_median", ".2f", NL2B), j("gaussian_reference[0].ess_per_draw_median", ".2f"),
         *(calc(lambda J, agg=agg: agg(r["step_size_median"] for p in (NL2, NL2B, NL2BA)
                                       for r in J(p, "rows") if r["config"] == "level2"), ".2f")
           for agg in (min, max))), cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "the table's 100 / 600 rows: {} -> {} ms", NL2BA,
        (j("rows[2].value_and_grad_s", lambda v: f"{v * 1e3:.2f}", NL2), j("rows[1].value_and_grad_s", lambda v: f"{v * 1e3:.2f}")),
        cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "300 x {}-{} s + one {} s compile = **{}-{} min** from the benchmark", NL2B,
        (j("rows[1].s_per_realization", ".1f"), j("rows[1].s_per_realization", ".1f", NL2BA), j("rows[1].compile_s", ".0f"),
         calc(lambda J: (300 * J(NL2B, "rows[1].s_per_realization") + J(NL2B, "rows[1].compile_s")) / 60, ".0f"),
         calc(lambda J: (300 * J(NL2BA, "rows[1].s_per_realization") + J(NL2B, "rows[1].compile_s")) / 60, ".0f")),
        cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "against the benchmark's {} s per batch of 2", NL2B, (j("rows[1].median_s", ".1f"),),
        cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "10, before the alias band): {} ESS(g) per second per galaxy ({} s per galaxy for min ESS {})", NL2,
        (j("rows[3].ess_g_per_s", ".0f"), j("rows[3].s_per_galaxy", ".1f"), j("rows[3].ess_g_min", ".0f")),
        cite="results/benchmarks/nuts_level2.json"),
    # scaling with galaxies per realization (scaling.json; one timed call each)
    Fig(BM, "quiet: load average {}-{}; commit `4f28827`", SCAL, load_range(SCAL)),
    Fig(BM, "| MAP + Laplace, s per realization | {} | {} | {} | {} |", SCAL,
        tuple(j(f"map_vs_m[{i}].realizations_per_s", lambda v, f=f: format(1 / v, f))
              for i, f in ((0, ".2f"), (1, ".2f"), (2, ".1f"), (3, ".0f")))),
    Fig(BM, "| MAP, compiled program MiB | {} | {} | {} | {} |", SCAL,
        tuple(j(f"map_vs_m[{i}].program_mib", f) for i, f in ((0, ".1f"), (1, ".0f"), (2, ".0f"), (3, ",.0f")))),
    Fig(BM, "| MAP with the dense `jax.hessian`, s / MiB | | {} / {} | | |", SCAL,
        (j("map_vs_m_dense[0].realizations_per_s", lambda v: f"{1 / v:.1f}"),
         j("map_vs_m_dense[0].program_mib", ".0f"))),
    Fig(BM, "| NUTS (2 chains x 100 warm-up + 100 draws), s per realization / MiB | {} / {} | {} / {} | | |", SCAL,
        tuple(v for i in (0, 1) for v in (j(f"nuts_vs_m[{i}].realizations_per_s", lambda v: f"{1 / v:.1f}"),
                                          j(f"nuts_vs_m[{i}].program_mib", ".1f" if i == 0 else ".0f")))),
    Fig(BM, "Memory is linear in M ({} MiB per galaxy) and in B ({}, {}, {} MiB for B = 1, 2, 4 at M = 8); the "
        "process peaked at {} MiB RSS (M = 128). Wall time grows faster than M (x{} from 32 to 128)", SCAL,
        (calc(lambda J: (J(SCAL, "map_vs_m[3].program_mib") - J(SCAL, "map_vs_m[0].program_mib")) / 127, ".1f"),
         *(j(f"map_vs_b[{i}].program_mib", ".0f") for i in range(3)),
         j("map_vs_m[3].peak_rss_mib", ",.0f"),
         calc(lambda J: J(SCAL, "map_vs_m[2].realizations_per_s") / J(SCAL, "map_vs_m[3].realizations_per_s"),
              ".0f"))),
    Fig(BM, "({}, {}, {} s at B = 1, 2, 4)", SCAL,
        tuple(j(f"map_vs_b[{i}].realizations_per_s", lambda v: f"{1 / v:.2f}") for i in range(3))),
    Fig(BM, "The block-arrow Hessian is {}x faster and {}x smaller than the dense one at M = 8", SCAL,
        (calc(lambda J: J(SCAL, "map_vs_m_dense[0].median_s") / J(SCAL, "map_vs_m[1].median_s"), ".1f"),
         calc(lambda J: J(SCAL, "map_vs_m_dense[0].program_mib") / J(SCAL, "map_vs_m[1].program_mib"), ".0f"))),
    Fig(BM, "NUTS with 200 short transitions costs {} s per realization at M = 1 and {} s at M = 8", SCAL,
        tuple(j(f"nuts_vs_m[{i}].realizations_per_s", lambda v: f"{1 / v:.1f}") for i in (0, 1))),
    Fig(BM, "that extrapolates to ~{} minutes per realization here (~{} CPU-hours for Level 2's 288 images)", SCAL,
        (calc(lambda J: nuts_l2_s(J) / 60, ".0f"), calc(lambda J: nuts_l2_s(J) * 288 / 3600, ".0f"))),
    Fig(BM, "Compilation: {}-{} s per MAP program, {}-{} s per NUTS program", SCAL,
        (*(calc(lambda J, agg=agg: agg(r["compile_s"] for k in ("map_vs_m", "map_vs_b") for r in J(SCAL, k)), ".0f")
           for agg in (min, max)),
         *(calc(lambda J, agg=agg: agg(r["compile_s"] for r in J(SCAL, "nuts_vs_m")), ".0f") for agg in (min, max)))),
    # kill and restart at random moments (chaos.json)
    Fig(BM, "record `chaos.json`, load {}-{}): a {}-realization Level 0", BENCH + "chaos.json",
        (j("load_average_end[0]", ".0f"), j("info.load_average_start[0]", ".0f"), j("n_planned", "d"))),
    Fig(BM, "two processes at a time, {} kills, each into a bias-run that had itself written at least one "
        "complete realization and held more ({}-{} written by it when hit, {}-{} s old), each with its "
        "documented exit status ({} SIGKILL: {}; the SIGTERM: {} in {} s; the SIGINT: {} in {} s), {} starts: "
        "{} of {} complete, all MAP draws bit-identical", BENCH + "chaos.json",
        (j("kills", "d"),
         *(calc(lambda J, agg=agg: agg(J(BENCH + "chaos.json", "written_when_hit")), "d") for agg in (min, max)),
         *(calc(lambda J, agg=agg: agg(J(BENCH + "chaos.json", "age_when_hit_s")), ".0f") for agg in (min, max)),
         calc(lambda J: sum(e["signal"] == "SIGKILL" and e["exit_ok"] for e in J(BENCH + "chaos.json", "events")),
              "d"),
         calc(lambda J: {e["exit"] for e in J(BENCH + "chaos.json", "events") if e["signal"] == "SIGKILL"}.pop(),
              "d"),
         j("sigterm[0].exit", "d"), j("sigterm[0].stop_s", ".1f"), j("sigint[0].exit", "d"),
         j("sigint[0].stop_s", ".1f"),
         calc(lambda J: sum(J(BENCH + "chaos.json", "starts").values()), "d"), j("draws_bit_identical", "d"),
         j("n_planned", "d"))),
    Fig(BM, "polled every 0.1 s; all {} attributed)", BENCH + "chaos.json",
        (calc(lambda J: sum(J(BENCH + "chaos.json", "written_by_pid").values()), ","),)),
    Fig(BM, "(reference {} s, chaos {} s)", BENCH + "chaos.json",
        (j("reference_wall_s", ".0f"), j("chaos_wall_s", ".0f"))),
    # stages 2 and 3 at field scale (stages_scale.json; level2_cpu_2d_wide/printed.txt)
    Fig(BM, "Sizes {}x apart", BENCH + "stages_scale.json",
        (calc(lambda J: J(BENCH + "stages_scale.json", "measured.stats_median.large.galaxies")
              / J(BENCH + "stages_scale.json", "measured.stats_median.small.galaxies"), ".1f"),)),
    # the summary table in seed parts (stats_rows.json)
    Fig(RM, "at 3 million realizations `bias-stats` peaked at {} MiB, where reading the table whole took {} MiB",
        BENCH + "stats_rows.json",
        (j("measured.median.3000000.peak_rss_mib", ".0f"), j("measured.before.peak_rss_mib", ".0f"))),
    *[Fig(BM, "| {} | {} | {} | {} | {} |", BENCH + "stats_rows.json",
          (j(f"measured.median.{n}.rows", ","), j(f"measured.runs.{n}[0].csv_bytes", lambda v: f"{v / 2**30:.2f}"),
           j(f"measured.median.{n}.parts", "d"), j(f"measured.median.{n}.wall_s", ".1f"),
           j(f"measured.median.{n}.peak_rss_mib", ".0f")))
      for n in ("500000", "3000000")],
    Fig(BM, "The peak RSS grows by {} bytes per realization over the {}x", BENCH + "stats_rows.json",
        (j("measured.rss_growth_bytes_per_row", ".0f"), j("measured.size_ratio", ".0f"))),
    Fig(BM, "took {} s and a peak RSS of {} MiB on the 3 million rows, with the same m1 = {} ± {}",
        BENCH + "stats_rows.json",
        (j("measured.before.wall_s", ".1f"), j("measured.before.peak_rss_mib", ".0f"),
         j("measured.before.m1", "+.3e"), j("measured.before.m1_err", ".2e"))),
    Fig(BM, "Before issue 43: {} with a peak RSS of {} kB for {} galaxies at 1,000 draws", WIDE + "printed.txt",
        (txt(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)"),
         txt(r"Maximum resident set size \(kbytes\): (\d+)"),
         j("fits.g1.n", ",d", WIDE + "bias_results.json")), cite="level2_cpu_2d_wide/printed.txt"),
]  # fmt: skip


def _anacal_rows() -> list[Fig]:
    """Issue 45's table in docs/validation.md: each row as bench/anacal_table.py renders
    it from its campaign's record (results/validation/anacal/<campaign>/validation.json)."""
    from tests.conftest import load_script

    mod = load_script("bench/anacal_table.py")
    out = []
    for name in mod.CAMPAIGNS:
        rec = VAL + f"anacal/{name}/validation.json"
        for row in mod.rows(load(rec), name):
            out.append(Fig(VM, row.replace("{", "{{").replace("}", "}}"), rec, (),
                           cite="results/validation/anacal/"))  # fmt: skip
    for name in mod.SCAN:  # Level 0's cell and shear scan (``--scan``)
        rec = VAL + f"anacal/{name}/validation.json"
        row = mod.scan_row(load(rec), name)
        out.append(Fig(VM, row.replace("{", "{{").replace("}", "}}"), rec, (),
                       cite="results/validation/anacal/"))  # fmt: skip
    return out


FIGURES += _anacal_rows()
FIGURES.append(
    Fig("docs/benchmarks.md", "quiet): before {}, shipped {} ({}x), with `campaign.draws: estimator` {} galaxies/s.",
        BENCH + "level2_campaign_long.json",
        (j("measured.median_galaxies_per_s.before", ".0f"), j("measured.median_galaxies_per_s.shipped", ".0f"),
         j("measured.ratio", ".2f"), j("measured.median_galaxies_per_s.shipped_estimator_draws", ".0f")))
)  # fmt: skip
_CELLS = ("level0_cell50", "level0", "level0_cell96", "level0_cell128")  # 50, 64, 96, 128 px


def _ana(J: Callable[..., Any], name: str, key: str) -> float:
    return J(VAL + f"anacal/{name}/validation.json", f"estimators.results.anacal.{key}")


def cell_spread(J: Callable[..., Any]) -> float:
    """The largest difference of AnaCal's m (m1 or m2) between the Level 0 cell sizes."""
    return max(
        max(_ana(J, n, c) for n in _CELLS) - min(_ana(J, n, c) for n in _CELLS)
        for c in ("m1", "m2")
    )


def cell_sigmas(J: Callable[..., Any]) -> float:
    """The largest difference of AnaCal's m between two cell sizes in their combined sigma."""
    return max(
        abs(_ana(J, a, c) - _ana(J, b, c))
        / math.hypot(_ana(J, a, c + "_err"), _ana(J, b, c + "_err"))
        for c in ("m1", "m2")
        for a in _CELLS
        for b in _CELLS
        if a < b
    )


def snr_ratio(J: Callable[..., Any]) -> float:
    """level2_snr1000's S/N (its command's --set) over configs/level2.yaml's, which level2_2d ran as shipped."""
    cmd = J(VAL + "anacal/level2_snr1000/validation.json", "command")
    high = float(re.search(r"--set image\.noise\.snr=(\S+)", cmd).group(1))
    shipped = float(re.search(r"^\s+snr:\s*(\S+)", load("configs/level2.yaml"), re.M).group(1))
    return high / shipped


FIGURES += [
    Fig(VM, "cells up to 128 px give m within {} of\neach other ({} of their sigma at most, m2 drifting by that much "
        "from 50 to 128 px)", VAL + "anacal/level0_cell128/validation.json",
        (calc(cell_spread, lambda v: f"{v * 1e5:.1f}e-5"), calc(cell_sigmas, ".1f")),
        cite="results/validation/anacal/"),
    Fig(VM, "(`--set image.noise.snr=1000`, the pixel noise\n{}x lower)", VAL + "anacal/level2_snr1000/validation.json",
        (calc(snr_ratio, ".0f"),), cite="results/validation/anacal/"),
]  # fmt: skip


def test_the_cell_scans_drift_is_m2s_from_50_to_128_px():
    """docs/validation.md: "m2 drifting by that much from 50 to 128 px" (the spread quoted)."""
    J = lambda path, key: get(load(path), key)  # noqa: E731
    drift = abs(_ana(J, "level0_cell128", "m2") - _ana(J, "level0_cell50", "m2"))
    assert f"{drift * 1e5:.1f}" == f"{cell_spread(J) * 1e5:.1f}"


def test_the_draws_study_stopped_when_each_shift_was_known_to_its_target():
    """docs/validation.md's "repeated with fresh draws until each shift is known to 2.7e-5":
    every row's three corrections have an error at most draws.json's target_err (none
    stopped at max_reps instead)."""
    rec = load(DRAWS)
    target, cap = rec["settings"]["target_err"], rec["settings"]["max_reps"]
    for r in rec["measured"]["rows"]:
        assert r["reps"] < cap, r["K"]
        for c in ("halves", "delta", "none"):
            assert r[c]["dm_err"] <= target, (r["proposal"], r["K"], c)


_A2 = VAL + "anacal/level2_2d/first_1200/validation.json"
_A1000 = VAL + "anacal/level2_snr1000/bias_results.json"
FIGURES += [
    Fig(VM, "AnaCal's m1 was {} ± {} and m2 {} ± {};", _A2,
        tuple(j(f"estimators.results.anacal.{k}", f) for k, f in
              (("m1", "+.2e"), ("m1_err", ".1e"), ("m2", "+.2e"), ("m2_err", ".1e")))),
    Fig(VM, "same images gives m1 = {} ± {}, m2 = {} ± {}", _A1000,
        tuple(j(k, f) for k, f in (("m1", "+.1e"), ("m1_err", ".1e"), ("m2", "+.1e"),
                                   ("m2_err", ".1e")))),
]  # fmt: skip


def same(vals: list[Any], fmt: str | Callable[[Any], str]) -> str:
    """Values quoted once for several ("in both components", "each"): their common
    rounding, or all of them joined by ``/`` where they differ (which no document quotes)."""
    out = [fmt(v) if callable(fmt) else format(v, fmt) for v in vals]
    return out[0] if len(set(out)) == 1 else "/".join(out)


def order(v: float) -> str:
    """``1e-3``: the power of ten nearest ``|v|`` ("of order 1e-3")."""
    return f"1e{round(math.log10(abs(v)))}"


def _failed_in_log(J: Callable[..., Any]) -> list[str]:
    """The run ids that the H100 campaign's Level 2 log says failed."""
    return sorted(set(re.findall(r"(g1_\S+) failed: ", J(GPU2D + "log.txt", ""))))


_A0 = VAL + "anacal/level0/validation.json"
_SCAN0 = ("level0_cell50", "level0", "level0_cell96", "level0_cell128", "level0_g01")
_NUMBER = {1: "one", 2: "two", 3: "three"}
# issue 56 item 5: the figures that were still quoted without a check
FIGURES += [
    # docs/validation.md, "AnaCal beside the forward model" (results/validation/anacal/)
    Fig(VM, "So at S/N 1000 FPFS's own m at Level 2 is at most of order {}; at S/N 45 the 2,400 seeds bound it "
        "only to their ~{} error.", VAL + "anacal/level2_snr1000/validation.json",
        (calc(lambda J: max(abs(_ana(J, "level2_snr1000", c)) for c in ("m1", "m2")), order),
         calc(lambda J: [_ana(J, "level2_2d", c + "_err") for c in ("m1", "m2")],
              lambda vs: same(vs, lambda v: f"{v * 1e3:.0f}e-3"))), cite="results/validation/anacal/"),
    Fig(VM, "AnaCal shows a multiplicative bias of order {} in both components, ~{} sigma from zero; the forward "
        "model's m is {}x (m1) and {}x (m2) smaller.", _A0,
        (calc(lambda J: [_ana(J, "level0", c) for c in ("m1", "m2")], lambda vs: same(vs, order)),
         calc(lambda J: [abs(_ana(J, "level0", c)) / _ana(J, "level0", c + "_err") for c in ("m1", "m2")],
              lambda vs: same(vs, ".0f")),
         *(calc(lambda J, c=c: abs(_ana(J, "level0", c) / J(_A0, f"estimators.results.map.{c}")), ".0f")
           for c in ("m1", "m2"))), cite="results/validation/anacal/"),
    Fig(VM, "(the scan below: {}x (m1) and {}x (m2) smaller at +-0.01, {}x and {}x larger at +-0.04, against 4x "
        "for a term in g^2)", VAL + "anacal/level0_g04/validation.json",
        (*(calc(lambda J, c=c: _ana(J, "level0", c) / _ana(J, "level0_g01", c), ".1f") for c in ("m1", "m2")),
         *(calc(lambda J, c=c: _ana(J, "level0_g04", c) / _ana(J, "level0", c), ".1f") for c in ("m1", "m2"))),
        cite="results/validation/anacal/"),
    Fig(VM, "it is at most {} (the scan's cells at +-0.02 and `level0_g01`)", VAL + "anacal/level0_g01/validation.json",
        (calc(lambda J: max(abs(_ana(J, n, c)) for n in _SCAN0 for c in ("m1", "m2")), ".2e"),),
        cite="results/validation/anacal/"),
    # docs/validation.md, "Levels 1 and 2": NUTS at Level 2 (scaling.json, as docs/benchmarks.md)
    Fig(VM, "about {} CPU-hours on this machine by the extrapolation of `results/benchmarks/scaling.json`", SCAL,
        (calc(lambda J: nuts_l2_s(J) * 288 / 3600, ".0f"),), cite="results/benchmarks/scaling.json"),
    # docs/validation.md, "The interim draws and their weights"
    Fig(VM, "within 1e-4 of the reference (at ~{} sigma of its Monte Carlo error)", EST,
        (calc(lambda J: [1e-4 / est_row(p, 1000, "dm_err")(J) for p in ("student_t", "student_t_narrow")],
              lambda vs: same(vs, ".0f")),), cite="results/benchmarks/estimator.json"),
    Fig(VM, "an additive term of ~{} (this run's c1)", GPU2D + "validation.json",
        (j("result.c1", lambda v: f"{abs(v) * 1e3:.0f}e-3"),), cite="level2_field_gpu/"),
    Fig(VM, "are {} images of one seed, {} (`level2_field_gpu/log.txt`)", GPU2D + "log.txt",
        (calc(lambda J: _NUMBER[len(_failed_in_log(J))], "s"),
         calc(lambda J: [re.search(r"_s(\d+)", r).group(1) for r in _failed_in_log(J)], lambda vs: same(vs, "s"))),
        cite="level2_field_gpu/log.txt"),
    Fig(VM, "opposite signs at ~{} sigma each", CPU2D + "bias_results.json",
        (calc(lambda J: [abs(J(GPU2D + "validation.json", "result.c1") / J(GPU2D + "validation.json", "result.c1_err")),
                         abs(J(CPU2D + "bias_results.json", "c1") / J(CPU2D + "bias_results.json", "c1_err"))],
              lambda vs: same(vs, ".0f")),), cite="level2_cpu_2d/"),
    # docs/benchmarks.md
    Fig(BM, "otherwise idle: load {} at the start, {} at the end; each command",
        BENCH + "import.json",
        (j("load_average_start[0]", ".1f"), j("load_average_end[0]", ".1f")),
        cite="results/benchmarks/import.json"),
    Fig(BM, "needs (warm-up + samples) x {} leapfrog steps (tree depth 3) x 4 chains", NL2,
        (calc(lambda J: [r["leapfrog_steps_per_call"] / (r["warmup"] + r["samples"]) for p in (NL2, NL2B, NL2BA)
                         for r in J(p, "rows") if r["config"] == "level2" and r["depth_warmup"] == 3
                         and r["depth_sampling"] == 3], lambda vs: same(vs, ".0f")),),
        cite="results/benchmarks/nuts_level2.json"),
    Fig(BM, "every array `scancel` hit tasks {}-{} s old, still {},", CHAOS,
        (*(calc(lambda J, agg=agg: agg(r["elapsed_s"] for f in J(CHAOS, "faults") if f["kind"] == "scancel_array"
                                       for r in f["target"]["running"]), "d") for agg in (min, max)),
         calc(lambda J: sorted({r["phase"] for f in J(CHAOS, "faults") if f["kind"] == "scancel_array"
                                for r in f["target"]["running"]}), lambda vs: " / ".join(vs)))),
]  # fmt: skip


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def sections(doc: str) -> list[str]:
    """The document's sections (a heading and the text up to the next one), each squashed."""
    parts, cur = [], []
    for line in (ROOT / doc).read_text().splitlines():
        if line.startswith("#") and cur:
            parts.append(squash("\n".join(cur)))
            cur = []
        cur.append(line)
    parts.append(squash("\n".join(cur)))
    return parts


@pytest.mark.parametrize("fig", FIGURES, ids=lambda f: f"{f.doc}:{f.text[:40]}")
def test_quoted_figure_is_its_records_value_and_the_section_names_the_record(fig):
    assert (ROOT / fig.record).is_file(), fig.record
    quoted = squash(fig.rendered())
    found = [s for s in sections(fig.doc) if quoted in s]
    assert found, (f"{fig.doc} does not quote {quoted!r}, the value of {fig.record} at the "
                   "quoted rounding: the document or the record changed")  # fmt: skip
    assert any(fig.citation() in s for s in found), (
        f"{fig.doc}: the section quoting {quoted!r} does not name its record {fig.citation()}"
    )


def test_printed_values_are_the_bias_results_values():
    """printed.txt (quoted as printed) is the campaign's bias_results.json, rounded."""
    for folder in (CPU2D, WIDE):
        res = load(folder + "bias_results.json")
        for comp in ("m1", "m2", "c1", "c2"):
            v, e = (r(folder + "printed.txt") for r in stat(comp, folder + "printed.txt"))
            assert math.isclose(float(v), res[comp], rel_tol=1e-3), (folder, comp)
            assert math.isclose(float(e), res[comp + "_err"], rel_tol=1e-2), (folder, comp)


@dataclass(frozen=True)
class Bound:
    """A bound quoted in a document ("within 3e-5", "less than 1e-3") that its record must
    meet: the text as quoted, in a section naming the record, and ``holds(J)`` true."""

    doc: str
    text: str
    record: str
    holds: Callable[[Callable[..., Any]], bool]
    cite: str


def _ana_diff(J: Callable[..., Any], name: str, key: str) -> float:
    return J(VAL + f"anacal/{name}/validation.json", f"estimators.differences.anacal - map.{key}")


def _halves_from_200(J: Callable[..., Any]) -> float:
    return max(abs(r["halves"]["dm"]) for r in J(DRAWS, "measured.rows") if r["K"] >= 200)


BOUNDS = [
    Bound(VM, "is within\n3e-5 from 200 on", DRAWS, lambda J: _halves_from_200(J) <= 3e-5,
          "results/benchmarks/draws.json"),
    Bound(RM, "within 3e-5 of a known answer from 200 draws", DRAWS,
          lambda J: _halves_from_200(J) <= 3e-5, "draws.json"),
    Bound(VM, "draws (what `configs/level2.yaml` shipped then) the Student-t proposal is within 1e-4 of the reference", EST,
          lambda J: all(abs(est_row(p, 1000, "dm")(J)) <= 1e-4 for p in ("student_t", "student_t_narrow")),
          "results/benchmarks/estimator.json"),
    Bound(VM, "on 2,400 seeds AnaCal's m1 and m2 are each within 2 of its sigma of\nzero",
          VAL + "anacal/level2_2d/validation.json",
          lambda J: all(abs(_ana(J, "level2_2d", c)) < 2 * _ana(J, "level2_2d", c + "_err") for c in ("m1", "m2")),
          "results/validation/anacal/"),
    Bound(VM, "with the forward model's\nwithin 1.5 sigma of their paired difference", VAL + "anacal/level2_2d/validation.json",
          lambda J: all(abs(_ana_diff(J, "level2_2d", d)) <= 1.5 * _ana_diff(J, "level2_2d", d + "_err")
                        for d in ("dm1", "dm2")),
          "results/validation/anacal/"),
    Bound(VM, "and m2 differs by\nless than 1e-3 (the table's paired difference)", VAL + "anacal/level2_snr1000/validation.json",
          lambda J: abs(_ana_diff(J, "level2_snr1000", "dm2")) < 1e-3, "results/validation/anacal/"),
    Bound(VM, "bring the collapse below 0.5% (the table's last row)", BENCH + "weights_level2.json",
          lambda J: J(BENCH + "weights_level2.json", "measured.galaxies.population_pooled.frac_below") < 0.005,
          "weights_level2.json"),
    Bound(VM, "36 tasks at the median\ntask's wall time alone exceed 90 minutes", E3 + "validation.json",
          lambda J: J(E3 + "validation.json", "timing.array_tasks.tasks") == 36
          and 36 * J(E3 + "validation.json", "timing.array_tasks.task_wall_s_median") > 90 * 60, "level2_2d_3e4/"),
]  # fmt: skip


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: f"{b.doc}:{b.text[:40]}")
def test_quoted_bound_holds_in_its_record_and_the_section_names_it(bound):
    quoted = squash(bound.text)
    found = [s for s in sections(bound.doc) if quoted in s]
    assert found, f"{bound.doc} does not quote {quoted!r}"
    assert any(bound.cite in s for s in found), f"{bound.doc}: {quoted!r} without {bound.cite}"
    assert bound.holds(lambda path, key: get(load(path), key)), (bound.text, bound.record)
