"""A double-entry ledger: journals post only when debits equal credits."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JournalLine:
    account: str
    debit_cents: int = 0
    credit_cents: int = 0


@dataclass
class Journal:
    memo: str
    lines: list[JournalLine] = field(default_factory=list)

    def debits(self) -> int:
        return sum(line.debit_cents for line in self.lines)

    def credits(self) -> int:
        return sum(line.credit_cents for line in self.lines)


class UnbalancedJournal(ValueError):
    """A journal whose debits and credits differ; posting it would corrupt the books."""


@dataclass
class Ledger:
    balances: dict[str, int] = field(default_factory=dict)  # account -> debit-positive cents
    posted: list[Journal] = field(default_factory=list)

    def post(self, journal: Journal) -> None:
        """Apply a balanced journal; refuse an unbalanced one without changing any balance."""
        if journal.debits() != journal.credits():
            raise UnbalancedJournal(
                f"journal {journal.memo!r}: debits {journal.debits()} != credits {journal.credits()} cents"
            )
        for line in journal.lines:
            self.balances[line.account] = (
                self.balances.get(line.account, 0) + line.debit_cents - line.credit_cents
            )
        self.posted.append(journal)

    def trial_balance(self) -> int:
        """Sum of all balances; zero for books that only ever took balanced journals."""
        return sum(self.balances.values())
