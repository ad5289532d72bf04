"""capacity-plugins: Locust plugins that turn an LLM inference load test into a capacity decision.

Data flows one way (see DESIGN.md): corpus -> user/dialect -> RequestRecord -> sinks -> results
folder -> analysis -> report + verdict. The simulator and the analysis never import the load side.
"""

__version__ = "0.1.0"
