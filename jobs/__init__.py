"""Model zoo and job files for pardnn-launch."""
