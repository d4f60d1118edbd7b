"""ENVIRONMENT: datasets in verl's schema, the prompt loader, and the built-in synthetic task."""
