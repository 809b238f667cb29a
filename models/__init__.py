"""The shared bidirectional encoder, its classifier heads, and the pluggable token mixers."""
