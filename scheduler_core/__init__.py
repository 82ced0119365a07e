"""scheduler_core: the reference overlap-scheduler serving engine that Parallax measures.

It imports nothing from `app` or `runners`: it is the system under test and is run at old
commits too.
"""
