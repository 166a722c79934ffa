"""Mirror customer records from a paged CRM export, then bill usage against the mirror."""
