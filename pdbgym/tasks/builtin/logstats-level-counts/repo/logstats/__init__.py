"""logstats: parse application logs and summarise them."""

from logstats.parse import Record, parse_lines
from logstats.report import Report, build_report, summarize_log

__all__ = ["Record", "Report", "build_report", "parse_lines", "summarize_log"]
