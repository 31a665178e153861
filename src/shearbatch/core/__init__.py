"""Pure JAX: rendering, generation, the model, posteriors, inference methods, flags.

Nothing here imports the config schema or touches files; it takes the plain
values of :mod:`shearbatch.spec`.
"""
