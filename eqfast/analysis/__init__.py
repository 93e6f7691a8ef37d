"""Analysis of finished records: validation against the exact solver and outcomes
(validation.py, behind eqfast-validate)."""
