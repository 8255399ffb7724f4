"""The master: experiment state, the search, and the API that tasks, trials and people call."""
