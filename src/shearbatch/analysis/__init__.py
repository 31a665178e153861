"""Stage 2 and 3: extract (directories -> summary table), estimators and errors,
calibration (coverage, SBC), the acceptance verdict, and figures."""
