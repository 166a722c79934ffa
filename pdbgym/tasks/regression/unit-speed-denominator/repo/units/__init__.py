"""Physical quantities with units: parse '12 km/h', check dimensions, convert."""
