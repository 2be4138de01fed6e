"""WheelFoundry."""
