"""Staff rostering: parse availability and shifts, assign workers to shifts."""
