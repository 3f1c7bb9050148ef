"""Test support shared by integration and cluster tests."""
