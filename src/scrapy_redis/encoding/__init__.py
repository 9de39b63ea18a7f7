"""Requests to stored bytes and back; fast URL canonicalization."""
