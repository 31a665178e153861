"""The ring and pair bookkeeping of stage 3 (:func:`complete_rings`, :func:`pair_table`),
vectorised for field-scale tables (issue 43), against their definitions written as plain
loops, on random tables with every irregularity a campaign can hold: missing copies,
duplicated rows, NaN and odd signs, empty and missing pair ids, mixed ring sizes."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from shearbatch.analysis.bias_fits import complete_rings, pair_table


def pairs_by_definition(pair_id, pair_sign):
    plus, minus = {}, {}
    for i, (pid, s) in enumerate(zip(pair_id, pair_sign, strict=True)):
        if isinstance(pid, str) and pid and s in (1, -1):
            (plus if s == 1 else minus).setdefault(pid, []).append(i)
    ids = sorted(k for k in plus if len(plus[k]) == 1 and len(minus.get(k, [])) == 1)
    return [plus[k][0] for k in ids], [minus[k][0] for k in ids]


def rings_by_definition(df):
    n = len(df)
    rot, nrot = df["rotation"].to_numpy(float), df["n_rotations"].to_numpy(float)
    if not np.any(np.isfinite(nrot) & (nrot > 1)):
        return np.ones(n, bool), 0
    sign = df["pair_sign"].to_numpy(float) if "pair_sign" in df else np.zeros(n)
    sign = np.where(np.isfinite(sign), sign, 0.0)
    paired = np.isin(sign, (1.0, -1.0))
    pid = df["pair_id"].fillna("").astype(str) if "pair_id" in df else None
    truth = df[["g1_true", "g2_true"]].to_numpy(float).round(12)
    seeds = df["seed"].astype(str).to_numpy()
    keys = [(sd, re.sub(r"_r\d+$", "", pid.iat[i]) if pr and pid is not None
             else tuple(truth[i])) for i, (sd, pr) in enumerate(zip(seeds, paired, strict=True))]  # fmt: skip
    members, need = {}, {}
    for key, r, sg in zip(keys, rot, sign, strict=True):
        members.setdefault(key, set()).add((r, sg))
    for key, nr, pr in zip(keys, nrot, paired, strict=True):
        rots = range(int(nr)) if np.isfinite(nr) and nr > 1 else [0]
        need[key] = {(float(r), s) for r in rots for s in ((1.0, -1.0) if pr else (0.0,))}
    done = {k for k, v in members.items() if {(float(r), s) for r, s in v} >= need[k]}
    return np.array([k in done for k in keys], bool), len(members) - len(done)


def random_table(rng, n_seeds, paired, with_pid=True):
    rows = []
    for sd in range(n_seeds):
        nr = int(rng.choice([2, 2, 2, 4]))
        for g in (0.02, -0.0, 0.0) if not paired else (0.02,):
            for r in range(nr):
                for s in (1.0, -1.0) if paired else (np.nan,):
                    if rng.random() < 0.08:  # a missing copy
                        continue
                    rows.append({"seed": sd, "rotation": float(r), "n_rotations": float(nr),
                                 "pair_sign": s,
                                 "g1_true": g * (s if paired and with_pid else 1),
                                 "g2_true": 0.01,
                                 "pair_id": f"s{sd}_g{g}_r{r}" if paired else ""})  # fmt: skip
                    if rng.random() < 0.03:  # a duplicated row
                        rows.append(dict(rows[-1]))
    df = pd.DataFrame(rows)
    odd = rng.random(len(df))
    df.loc[odd < 0.02, "pair_sign"] = 0.5
    df.loc[(odd > 0.98) & (odd < 0.99), "rotation"] = 1.5
    df.loc[odd > 0.995, "pair_id"] = None
    df.loc[(odd > 0.6) & (odd < 0.62), "n_rotations"] = np.nan
    if not with_pid:
        df = df.drop(columns="pair_id")
    return df.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("paired", "with_pid"), [(True, True), (False, True), (True, False)])
def test_complete_rings_as_defined(seed, paired, with_pid):
    df = random_table(np.random.default_rng(seed), 40, paired, with_pid)
    keep, incomplete = complete_rings(df)
    want_keep, want_incomplete = rings_by_definition(df)
    assert incomplete == want_incomplete
    np.testing.assert_array_equal(keep, want_keep)
    assert 0 < keep.sum() < len(df)  # the table has both kinds of ring


@pytest.mark.parametrize("seed", range(6))
def test_pair_table_as_defined(seed):
    df = random_table(np.random.default_rng(seed), 40, True)
    pid = df["pair_id"].to_numpy(object)
    pid[::17] = ""
    pid[1::19] = 3.0  # not text: never a pair
    ip, im = pair_table(pid, df["pair_sign"].to_numpy(float))
    want_p, want_m = pairs_by_definition(pid, df["pair_sign"].to_numpy(float))
    assert ip.tolist() == want_p and im.tolist() == want_m
    assert len(ip) > 0 and ip.dtype.kind == "i"


def test_empty_tables():
    ip, im = pair_table(np.array([], object), np.array([], float))
    assert ip.size == im.size == 0
    df = pd.DataFrame({"seed": [], "rotation": [], "n_rotations": [], "g1_true": [],
                       "g2_true": []})  # fmt: skip
    keep, n = complete_rings(df)
    assert keep.size == 0 and n == 0
