"""A shop checkout: catalogue, promotions, orders and a margin audit."""
