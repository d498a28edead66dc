# Makes the pickles of tests/agent/data that pickle_reader's tests read: one value of
# every plain type in protocols 2 and 4 (as Python's pickle writes them), and a pickle
# of an object (a global), which the reader refuses. Run again to regenerate:
#   python3 make_pickles.py
# nccl_trace_h100_rank_0.pickle is a real dump of torch 2.11's NCCL flight recorder,
# from examples/hang_demo.py --device cuda --fault gpu on an H100 (scripts/gpu-check.sh):
# all_reduce #20 scheduled, never completed.
import datetime
import pickle

PLAIN = {"a": [1, -2, 300, 70000, 2**40, -2**40, 1.5, None, True, False, "\u00fc", (1, 2), (), (3,),
               (4, 5, 6), (7, 8, 9, 10)],
         "b": {"c": "x" * 300}, 5: "int key"}
for protocol in (2, 4):
    with open(f"plain_data_p{protocol}.pickle", "wb") as f:
        pickle.dump(PLAIN, f, protocol=protocol)
with open("object.pickle", "wb") as f:
    pickle.dump(datetime.date(2020, 1, 1), f, protocol=2)
