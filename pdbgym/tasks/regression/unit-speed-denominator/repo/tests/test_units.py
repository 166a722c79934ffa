import pytest

from units.convert import DimensionError, convert, quantity
from units.parse import UnitSyntaxError, parse_unit
from units.registry import UnknownUnit
from units.trip import average_speed, travel_time_h


def test_length_conversion():
    assert convert(quantity("5 mi"), "km") == pytest.approx(8.04672)


def test_acceleration_dims():
    assert parse_unit("m/s^2").dims_dict() == {"L": 1, "T": -2}


def test_newton_equals_base_units():
    assert convert(quantity("3 N"), "kg*m/s^2") == pytest.approx(3.0)
    assert convert(quantity("2 kg*m^2/s^2"), "J") == pytest.approx(2.0)


def test_unknown_unit_is_named():
    with pytest.raises(UnknownUnit, match="furlong"):
        parse_unit("furlong")


def test_two_slashes_rejected():
    with pytest.raises(UnitSyntaxError):
        parse_unit("kg/m/s")


def test_mismatched_dimensions_rejected():
    with pytest.raises(DimensionError, match="expected T"):
        convert(quantity("3 m"), "s")


def test_average_speed_from_minutes():
    assert average_speed("10 mi", "15 min", unit="mph") == pytest.approx(40.0)


def test_motorway_speed_in_mph():
    assert convert(quantity("100 km/h"), "mph") == pytest.approx(62.1371, rel=1e-5)


def test_travel_time():
    assert travel_time_h("150 km", "90 km/h") == pytest.approx(5 / 3)


def test_knots_to_km_per_hour():
    assert convert(quantity("10 kn"), "km/h") == pytest.approx(18.52)


def test_average_speed_default_km_per_hour():
    assert average_speed("42.195 km", "2 h") == pytest.approx(21.0975)


def test_plain_denominator_is_negated():
    unit = parse_unit("km/h")
    assert unit.dims_dict() == {"L": 1, "T": -1}
    assert unit.factor == pytest.approx(1000 / 3600)
