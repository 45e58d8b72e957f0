"""One router per resource: studies, trials, system (health, Prometheus metrics)."""
