"""Development tools beside the product, imported by no product code (only the CLI's commands for
them): the local stack (``stack``), fault injection (``faults``), synthetic histories (``gen``) and
the sample cluster history of ``strata demo`` (``samples``)."""
