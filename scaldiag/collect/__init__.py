"""Capture: samplers, the step recorder, framework adapters. Frameworks are imported lazily."""
