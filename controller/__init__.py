"""The controller C: trained inside the world model's dream, evaluated on the real env."""
