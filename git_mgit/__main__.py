from git_mgit.cli import entry

entry()
