print("rouse")
