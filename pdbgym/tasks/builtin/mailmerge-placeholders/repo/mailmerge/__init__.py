"""mailmerge: {{ name | filter }} templates for transactional e-mail."""

from mailmerge.render import RenderError, render, required_fields
from mailmerge.template import Placeholder, placeholders

__all__ = ["Placeholder", "RenderError", "placeholders", "render", "required_fields"]
