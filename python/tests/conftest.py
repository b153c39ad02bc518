import sys
from pathlib import Path

# Lets `pytest python/tests` work from a checkout without `pip install -e python`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
