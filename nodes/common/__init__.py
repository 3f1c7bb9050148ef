"""nodes.common"""
