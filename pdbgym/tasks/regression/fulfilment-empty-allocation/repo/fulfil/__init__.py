"""Order fulfilment: allocate order lines to warehouses, then build pick lists and shipments."""
