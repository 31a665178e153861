# Sourced by ci/gpu_check.sh and ci/gpu_session.sh (the GPU node's set-up, one copy).
# Needs PY (the Python to use) and say (a log function) defined by the caller.

# gpu_install_wheels: .whl/*.whl (the packages a node without network lacks:
# ../shared/gpu/README.md) into /tmp/site, put first on PYTHONPATH; 9 if they do not install
gpu_install_wheels() {
  if compgen -G ".whl/*.whl" > /dev/null; then
    timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/*.whl || { say "wheel install failed"; return 9; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    say "installed $(ls .whl/*.whl | wc -l) wheels into /tmp/site"
  else
    say "no .whl/ here: using the packages installed"
  fi
}

# gpu_probe SECONDS: JAX's devices, backend and device memory, and the imports bias-run
# needs, under a timeout; prints "jax <version> devices [...] backend <name>" first
gpu_probe() {
  timeout "$1" "$PY" - <<'PROBE'
import jax
d = jax.devices()[0]
print("jax", jax.__version__, "devices", jax.devices(), "backend", jax.default_backend())
print("memory_stats", {k: v for k, v in (d.memory_stats() or {}).items()
                       if k in ("bytes_limit", "bytes_in_use", "peak_bytes_in_use")})
import shearbatch.cli, pydantic, netCDF4, arviz  # everything bias-run imports
print("shearbatch", shearbatch.__version__, "from", shearbatch.__file__)
PROBE
}
