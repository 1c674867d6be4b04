"""The server's lifecycle and the streaming load client that measures it."""
