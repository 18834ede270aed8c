"""Chapter orchestration: each module holds a chapter's SPEC, CHECKS and experiment functions."""
