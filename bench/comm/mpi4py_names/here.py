"""Which programs of the counts use only names tiertrain.comm has (a name-level check, not a run of each).

    python3 here.py COUNTS.json     (with the tiertrain package importable)
"""
import json, collections, sys
import tiertrain.comm as tc
raw=json.load(open(sys.argv[1]))['programs']
classes=[tc.Comm, tc.Request, tc.Status, tc.Datatype, tc.Prequest, tc.ObjRequest, tc.Cartcomm]
classes+=[getattr(tc, c) for c in ("Win", "Group", "File") if hasattr(tc, c)]  # (2026-12-07)
inst={'Status': {'source','tag','error','count'}}
def ok(name):
    if name.startswith('MPI.'):
        obj=tc
        for q in name[4:].split('.'):
            if q in ('Status',) and obj is tc: obj=tc.Status; continue
            if not hasattr(obj,q):
                return False
            obj=getattr(obj,q)
        return True
    if name.startswith('.'):
        m=name[1:].split('(')[0]
        return any(hasattr(c,m) for c in classes)
    if '(property)' in name:
        cls,attr=name.split()[0].split('.')
        if cls=='Comm': return hasattr(tc.Comm,attr) or hasattr(tc.Cartcomm, attr)
        if cls=='Status': return attr in inst['Status']
        return False
    return False  # mpi4py.* modules
good=0; blockers=collections.Counter(); missing_per=[]
for f,names in raw.items():
    miss=[n for n in names if not ok(n)]
    if not miss: good+=1
    else:
        for n in set(miss): blockers[n]+=1
        missing_per.append((f,miss))
print("programs whose every name is here:", good, "of", len(raw))
for n,c in blockers.most_common(40): print(c, n)
