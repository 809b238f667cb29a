"""Published LRA accuracies (published_lra.csv), the reference rows of `lra table`."""
