"""tracker: tickets, assignment, blocking links, JSON save/load."""

from tracker.models import Status, Ticket
from tracker.persist import dumps, loads
from tracker.store import TicketStore, UnknownTicket

__all__ = ["Status", "Ticket", "TicketStore", "UnknownTicket", "dumps", "loads"]
