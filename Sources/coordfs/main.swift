print("coordfs")
