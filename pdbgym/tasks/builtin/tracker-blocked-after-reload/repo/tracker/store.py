"""In-memory ticket store: create, assign, link, query."""

from __future__ import annotations

from collections.abc import Iterable

from tracker.models import Status, Ticket


class UnknownTicket(KeyError):
    """No ticket has the given id."""


class TicketStore:
    def __init__(self) -> None:
        self._tickets: dict[int, Ticket] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._tickets)

    def create(self, title: str, labels: Iterable[str] = ()) -> Ticket:
        ticket = Ticket(id=self._next_id, title=title, labels=sorted(set(labels)))
        self._tickets[ticket.id] = ticket
        self._next_id += 1
        return ticket

    def get(self, ticket_id: int) -> Ticket:
        try:
            return self._tickets[ticket_id]
        except KeyError:
            raise UnknownTicket(ticket_id) from None

    def all(self) -> list[Ticket]:
        return [self._tickets[key] for key in sorted(self._tickets)]

    def assign(self, ticket_id: int, person: str) -> None:
        ticket = self.get(ticket_id)
        ticket.assignee = person
        if ticket.status is Status.OPEN:
            ticket.status = Status.IN_PROGRESS

    def close(self, ticket_id: int) -> None:
        self.get(ticket_id).status = Status.DONE

    def block(self, ticket_id: int, blocker_id: int) -> None:
        """Record that ``ticket_id`` cannot start before ``blocker_id`` is done."""
        if ticket_id == blocker_id:
            raise ValueError(f"ticket {ticket_id} cannot block itself")
        self.get(blocker_id)  # fail early on an unknown blocker
        ticket = self.get(ticket_id)
        if blocker_id not in ticket.blocked_by:
            ticket.blocked_by.append(blocker_id)

    def find(self, title: str) -> Ticket:
        for ticket in self._tickets.values():
            if ticket.title == title:
                return ticket
        raise UnknownTicket(title)

    def open_blockers(self, ticket: Ticket) -> list[Ticket]:
        blockers = (self._tickets.get(blocker_id) for blocker_id in ticket.blocked_by)
        # A blocker that was deleted no longer blocks anything.
        return [blocker for blocker in blockers if blocker is not None and blocker.is_open]

    def is_ready(self, ticket: Ticket) -> bool:
        """True when the ticket is open and nothing open blocks it."""
        return ticket.is_open and not self.open_blockers(ticket)

    def delete(self, ticket_id: int) -> None:
        self.get(ticket_id)
        del self._tickets[ticket_id]

    def ready_queue(self) -> list[Ticket]:
        return [ticket for ticket in self.all() if self.is_ready(ticket)]

    def by_assignee(self, person: str) -> list[Ticket]:
        return [ticket for ticket in self.all() if ticket.assignee == person]
