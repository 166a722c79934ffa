"""Usage-based billing: read metering exports, rate them against a tariff, render invoices."""
