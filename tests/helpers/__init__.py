"""Helpers shared by test modules: imported from here, never from another test module or from launch.py.

stage: a config composed as on the command line, a stage run in process, launch.py run as users run it.
episodes: the default episode limits, a scripted policy, mock tasks, tools that block until released.
"""
