"""The machine a run lives on: devices and hosts (distributed), memory against the device's,
calls isolated in a fresh process, signals (interrupts) and wall-time limits (stop_after).
May import: lra.base, lra.errors only (and JAX)."""
