"""The code host seen through one interface (``base.Forge``)."""
