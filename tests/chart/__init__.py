# tests.chart: the Helm chart's suite (test_chart.py), run as
# python3 -m tests.chart.test_chart over tests.cluster's tooling.
