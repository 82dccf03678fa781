"""``perftune compare OLD NEW``: did a change make training slower, with the noise taken into account?

``load`` reads each side, ``match`` pairs configurations by their knob values and checks that the sides can be
compared, ``metrics`` compares one configuration, ``run`` puts it together (``run_compare``), ``render`` writes
text and Markdown.  The CLI writes the files.
"""
